"""The grounding eval's HTML page: the gate, each model's metrics overall and by slice, and sample wrong answers."""

from __future__ import annotations

from html import escape
from typing import Any

_COLUMNS = (
    ("items", "items"),
    ("accuracy", "accuracy"),
    ("hallucination_rate", "hallucinated objects"),
    ("hallucinating_answers", "answers hallucinating"),
    ("pope.accuracy", "POPE yes/no accuracy"),
    ("guardrail.precision", "guardrail precision"),
    ("guardrail.recall", "guardrail recall"),
    ("guardrail.false_flag_rate", "false flags"),
)
_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2rem;color:#222}table{border-collapse:collapse;margin:.5rem 0 1.5rem}"
    "th,td{border:1px solid #ccc;padding:.25rem .6rem;text-align:right}th:first-child,td:first-child{text-align:left}"
    ".fail{color:#b00}.pass{color:#070}td.text{text-align:left;max-width:32rem}"
)


def cell(row: dict[str, Any], dotted: str) -> str:
    value: Any = row
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return "—"
    return f"{value:.1%}" if isinstance(value, float) else str(value)


def _table(title: str, rows: dict[str, dict[str, Any]]) -> str:
    head = "".join(f"<th>{escape(label)}</th>" for _, label in _COLUMNS)
    body = "".join(
        f"<tr><td>{escape(name)}</td>" + "".join(f"<td>{cell(row, key)}</td>" for key, _ in _COLUMNS) + "</tr>"
        for name, row in rows.items()
    )
    return f"<h3>{escape(title)}</h3><table><tr><th></th>{head}</tr>{body}</table>"


def render_html(report: dict[str, Any], max_wrong: int = 40) -> str:
    """A self-contained HTML page: the gate, each model's metrics overall and by slice, and sample wrong answers."""
    g = report["gate"]
    verdict = "pass" if g.get("passed") else "fail"
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>Grounding eval</title><style>{_STYLE}</style>",
        "</head><body><h1>Grounding eval</h1>",
        f"<p>{escape(report.get('set', ''))} · {escape(report['started_at'])} · max_tokens {report['max_tokens']}"
        f"{' · smoke' if report.get('smoke') else ''}</p>",
        f"<p class='{verdict}'>Gate on <b>{escape(g['model'])}</b> (accuracy ≥ {g['accuracy_min']:.0%}, hallucinated "
        f"objects ≤ {g['hallucination_max']:.0%}): <b>{verdict}</b> {escape('; '.join(g.get('failures', [])))}</p>",
    ]
    for model, run in report["models"].items():
        summary = run["summary"]
        parts.append(f"<h2>{escape(model)} <small>({run['seconds']} s)</small></h2>")
        parts.append(_table("Overall", {"all": summary["overall"]}))
        parts.append(_table("By modality mix", summary["by_mix"]))
        parts.append(_table("By question kind", summary["by_kind"]))
        at = (summary["overall"].get("guardrail") or {}).get("by_threshold")
        if at:
            rows = "".join(
                f"<tr><td>{escape(t)}</td>"
                + "".join(f"<td>{cell(f, k)}</td>" for k in ("precision", "recall", "false_flag_rate"))
                + "</tr>"
                for t, f in at.items()
            )
            parts.append(
                "<h3>Guardrail at other tenant thresholds</h3><table><tr><th>threshold</th><th>precision</th>"
                f"<th>recall</th><th>false flags</th></tr>{rows}</table>"
            )
        wrong = [r for r in run["results"] if not r["correct"]][:max_wrong]
        if wrong:
            rows = "".join(
                f"<tr><td>{escape(r['id'])}</td><td class='text'>{escape(r['question'])}</td>"
                f"<td class='text'>{escape(r['answer'])}</td><td class='text'>{escape(r['reference'])}</td>"
                f"<td class='text'>{escape('; '.join(r['problems']))}</td>"
                f"<td>{'—' if r.get('flagged') is None else ('flagged' if r['flagged'] else 'passed')}</td></tr>"
                for r in wrong
            )
            parts.append(
                f"<h3>Wrong answers (first {len(wrong)})</h3><table><tr><th>item</th><th>question</th><th>answer</th>"
                f"<th>reference</th><th>why</th><th>guardrail</th></tr>{rows}</table>"
            )
    parts.append("</body></html>")
    return "".join(parts)
