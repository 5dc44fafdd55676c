"""What the console shows of answer quality: grounding, the guardrail's verdicts, thumbs and regenerations per
slice, and the headline of the latest offline grounding eval (`tessera eval grounding`)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from tenancy.metering import grounding_slices, regeneration_by_mix

# Where `tessera eval grounding --json ... --report ...` is expected to have written the latest run. Relative, so
# read from the directory the server was started in; fixed, so no request can name another file.
EVAL_JSON = Path("artifacts/eval/grounding.json")
EVAL_HTML = Path("artifacts/eval/grounding.html")
EVAL_MAX_BYTES = 64 * 1024 * 1024  # a full held-out run with every answer is a few MB
# The eval's HTML page carries its own <style> and nothing else: it is shown sandboxed, with no scripts, no
# fetches and no forms, so inline styles are the only thing allowed beyond the console's policy.
EVAL_REPORT_POLICY = "; ".join(
    (
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "sandbox",
    )
)
FLAGGED = "flagged: below threshold"  # the words a flagged answer is marked with, wherever it is listed


def slice_rows(grounding: list[dict[str, Any]], regeneration: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Grounding and regeneration rows of one slicing by modality mix, joined on the mix, in mix order: a mix
    with requests but no scores still shows its regeneration rate, and a scored mix without fingerprints shows
    none."""
    by_mix: dict[str, dict[str, Any]] = {}
    for g in grounding:
        by_mix[g["modalities"]] = {**g, "regeneration": None}
    for r in regeneration:
        unscored = {"modalities": r["modalities"], "scored": 0, "mean": None, "below": 0, "judged": 0, "passed": 0}
        row = by_mix.setdefault(r["modalities"], unscored)
        row["regeneration"] = r
    return sorted(by_mix.values(), key=lambda row: _mask(row["modalities"]))


def _mask(mix: str) -> int:
    """The usage row's bit mask of a mix name, which orders mixes as the usage tables do."""
    return sum(bit for bit, name in ((1, "text"), (2, "image"), (4, "audio")) if name in mix.split("+"))


def overview_quality(db: Engine, since: datetime, until: datetime) -> dict[str, Any]:
    """Every tenant's grounding, verdicts and thumbs by modality mix and by question kind, and regeneration rates
    by mix, over [since, until)."""
    by_mix = grounding_slices(db, since, until, by="mix")
    regeneration = regeneration_by_mix(db, since, until)
    return {
        "by_mix": slice_rows(by_mix, regeneration),
        "by_kind": grounding_slices(db, since, until, by="kind"),
    }


def _rate(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _figures(found: Any) -> dict[str, Any]:
    summary = _dict(found)
    pope, guardrail = _dict(summary.get("pope")), _dict(summary.get("guardrail"))
    items = summary.get("items")
    return {
        "items": items if isinstance(items, int) else None,
        "accuracy": _rate(summary.get("accuracy")),
        "hallucination_rate": _rate(summary.get("hallucination_rate")),
        "pope_accuracy": _rate(pope.get("accuracy")),
        "guardrail_precision": _rate(guardrail.get("precision")),
        "guardrail_recall": _rate(guardrail.get("recall")),
    }


def eval_headline(json_path: Path = EVAL_JSON, html_path: Path = EVAL_HTML) -> dict[str, Any] | None:
    """The latest grounding eval's headline figures (per model: overall and by modality mix), None when no
    report is there, or `error` when it cannot be read: the overview must show, never fail."""
    if not json_path.is_file():
        return None
    headline: dict[str, Any] = {"path": str(json_path), "has_html": html_path.is_file(), "error": None}
    try:
        if json_path.stat().st_size > EVAL_MAX_BYTES:
            raise ValueError(f"it is over {EVAL_MAX_BYTES // (1024 * 1024)} MB")
        report = json.loads(json_path.read_text(encoding="utf-8"))
        if not isinstance(report, dict) or not isinstance(report.get("models"), dict):
            raise ValueError("it holds no models")
    except (OSError, ValueError) as exc:
        return {**headline, "error": f"{json_path} could not be read: {exc}"}
    gate = _dict(report.get("gate"))
    models = []
    for name, run in report["models"].items():
        summary = _dict(_dict(run).get("summary"))
        by_mix = _dict(summary.get("by_mix"))
        overall = {"slice": "overall", **_figures(summary.get("overall"))}
        mixes = [{"slice": str(mix), **_figures(row)} for mix, row in by_mix.items()]
        models.append({"name": str(name), "overall": overall, "slices": [overall, *mixes]})
    return {
        **headline,
        "started_at": str(report.get("started_at") or ""),
        "set": str(report.get("set") or ""),
        "smoke": bool(report.get("smoke")),
        "gate_model": str(gate.get("model") or ""),
        "gate_passed": gate.get("passed") if isinstance(gate.get("passed"), bool) else None,
        "gate_failures": [str(f) for f in gate.get("failures") or [] if isinstance(f, str)],
        "models": models,
    }


def eval_report_html(html_path: Path = EVAL_HTML) -> str | None:
    """The latest eval's HTML report, or None when there is none."""
    if not html_path.is_file() or html_path.stat().st_size > EVAL_MAX_BYTES:
        return None
    return html_path.read_text(encoding="utf-8", errors="replace")
