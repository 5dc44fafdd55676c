"""`tessera eval grounding`: golden items through the real server path, scored, sliced, reported and gated.

What is evaluated comes in as an `EvalSuite` the command line hands over: the golden items, their media rendered
as bytes, and the judge of an answer. Each item becomes one chat completion sent with the official `openai` SDK at
temperature 0: the item's media parts in its `media_order` (the image as a PNG data URL `image_url`, the clip as
base64 WAV `input_audio`), then the question as text. The guardrail's verdict is read from the response when the
server attaches one (a `grounding` object with `flagged` or `passed`, on the completion or its choice, or a
`refusal` on the message); without one, guardrail metrics are null, never guessed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from grounding.eval_metrics import GATE, EvalFailure, ItemResult, check_well_formed, gate, summarise
from grounding.report import cell, render_html

Progress = Callable[[str], None]
DEFAULT_MODEL, SMOKE_MODEL = "large", "small"
DEFAULT_MAX_TOKENS, SMOKE_MAX_TOKENS = 96, 16
DEFAULT_BUDGET_S, SMOKE_BUDGET_S = 4 * 3600.0, 600.0
REQUEST_TIMEOUT_S = 300.0


class Server(Protocol):
    base: str  # http://host:port, without /v1
    key: str


Launcher = Callable[..., AbstractContextManager[Server]]  # (models, progress, guardrail=policy)


class EvalItem(Protocol):
    """A golden item: a question about media, its reference answer and the facts an answer is judged by."""

    @property
    def id(self) -> str: ...
    @property
    def mix(self) -> str: ...  # "image", "audio" or "image+audio"
    @property
    def target(self) -> str: ...  # the medium the question is about
    @property
    def kind(self) -> str: ...  # grounding.questions' kind
    @property
    def question(self) -> str: ...
    @property
    def answer(self) -> str: ...
    @property
    def facts(self) -> dict[str, Any]: ...
    @property
    def media_order(self) -> Sequence[str]: ...


class Judgement(Protocol):
    @property
    def correct(self) -> bool: ...
    @property
    def problems(self) -> tuple[str, ...]: ...
    @property
    def objects(self) -> frozenset[str]: ...  # objects the answer asserts
    @property
    def hallucinated(self) -> frozenset[str]: ...  # of those, the ones not in the asked medium
    @property
    def yes_no(self) -> str | None: ...


Item = TypeVar("Item", bound=EvalItem)


@dataclass(frozen=True)
class EvalSuite(Generic[Item]):
    """What the eval runs on: where its sets are, how to read one, an item's media as bytes, and the judge."""

    sets: Path  # the folder of `heldout.jsonl` and `smoke.jsonl`
    read: Callable[[Path], Sequence[Item]]
    image_png: Callable[[Item], bytes | None]  # None: the item has no image to send (an empty URL goes)
    audio_wav: Callable[[Item], bytes]
    judge: Callable[[Item, str], Judgement]

    def default_set(self, smoke: bool) -> Path:
        return self.sets / ("smoke.jsonl" if smoke else "heldout.jsonl")


def request_messages(item: EvalItem, suite: EvalSuite[Any]) -> list[dict[str, Any]]:
    """One user message: the media in the item's order, then the question."""
    parts: list[dict[str, Any]] = []
    for medium in item.media_order:
        if medium == "image":
            png = suite.image_png(item)
            url = "data:image/png;base64," + base64.b64encode(png).decode() if png else ""
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            data = base64.b64encode(suite.audio_wav(item)).decode()
            parts.append({"type": "input_audio", "input_audio": {"data": data, "format": "wav"}})
    parts.append({"type": "text", "text": item.question})
    return [{"role": "user", "content": parts}]


def _grounding_object(completion: dict[str, Any]) -> dict[str, Any] | None:
    choices = completion.get("choices") or [{}]
    for holder in (choices[0], completion):
        verdict = holder.get("grounding")
        if isinstance(verdict, dict):
            return verdict
    return None


def guardrail_flag(completion: dict[str, Any]) -> bool | None:
    """True when the server's grounding guardrail failed the answer, False when it passed it, None if silent."""
    verdict = _grounding_object(completion) or {}
    if isinstance(verdict.get("flagged"), bool):
        return bool(verdict["flagged"])
    if isinstance(verdict.get("passed"), bool):
        return not verdict["passed"]
    choices = completion.get("choices") or [{}]
    return True if (choices[0].get("message") or {}).get("refusal") else None


def guardrail_details(completion: dict[str, Any]) -> tuple[list[str] | None, float | None]:
    """The claims the server's guardrail found unsupported and the answer's score, each None when not given."""
    verdict = _grounding_object(completion) or {}
    claims, score = verdict.get("unsupported_claims"), verdict.get("score")
    return (
        [str(c) for c in claims] if isinstance(claims, list) else None,
        float(score) if isinstance(score, int | float) else None,
    )


def _result(
    suite: EvalSuite[Any],
    item: EvalItem,
    model: str,
    answer: str,
    flagged: bool | None,
    latency: float,
    error: str | None,
    details: tuple[list[str] | None, float | None] = (None, None),
) -> ItemResult:
    verdict = suite.judge(item, answer)
    problems = [f"request failed: {error}"] if error else list(verdict.problems)
    return ItemResult(
        id=item.id,
        model=model,
        mix=item.mix,
        target=item.target,
        kind=item.kind,
        question=item.question,
        reference=item.answer,
        answer=answer,
        correct=verdict.correct and error is None,
        problems=problems,
        objects=sorted(verdict.objects),
        hallucinated=sorted(verdict.hallucinated),
        yes_no=verdict.yes_no,
        expected=item.facts.get("expected") if item.kind == "exists" else None,
        flagged=flagged,
        latency_s=round(latency, 3),
        error=error,
        unsupported=details[0],
        score=details[1],
    )


def ask(client: Any, suite: EvalSuite[Any], model: str, item: EvalItem, max_tokens: int) -> ItemResult:
    """One item through the server; a refused or failed request is recorded as a wrong answer with its error."""
    import openai

    started = time.perf_counter()
    try:
        completion = client.chat.completions.create(
            model=model, messages=request_messages(item, suite), temperature=0, max_tokens=max_tokens
        )
    except openai.OpenAIError as exc:
        failure = f"{type(exc).__name__}: {exc}"[:500]
        return _result(suite, item, model, "", None, time.perf_counter() - started, failure)
    data = completion.model_dump()
    answer = (data["choices"][0]["message"].get("content") or "") if data.get("choices") else ""
    elapsed = time.perf_counter() - started
    return _result(suite, item, model, answer, guardrail_flag(data), elapsed, None, guardrail_details(data))


def run_items(
    client: Any,
    suite: EvalSuite[Any],
    model: str,
    items: Sequence[EvalItem],
    *,
    max_tokens: int,
    deadline: float,
    progress: Progress,
    concurrency: int = 1,
) -> list[ItemResult]:
    """Every item, `concurrency` at a time, until the list or the time (a `time.monotonic()` deadline) runs out;
    results come back in the items' order."""
    from concurrent.futures import ThreadPoolExecutor

    def one(item: EvalItem) -> ItemResult | None:
        return None if time.monotonic() > deadline else ask(client, suite, model, item, max_tokens)

    results: list[ItemResult] = []
    right = 0
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for number, (item, result) in enumerate(zip(items, pool.map(one, items), strict=True), 1):
            if result is None:
                progress(f"  {model}: time budget spent after {len(results)} of {len(items)} items")
                break
            results.append(result)
            right += result.correct
            mark = "ok " if result.correct else ("ERR" if result.error else "-- ")
            answer = result.answer[:60]
            progress(f"  {model} [{number}/{len(items)}] {mark} {item.id} {item.kind}: {answer!r} ({right} right)")
    return results


def _client(base_url: str, api_key: str) -> Any:
    import openai

    return openai.OpenAI(base_url=base_url, api_key=api_key, timeout=REQUEST_TIMEOUT_S, max_retries=0)


def evaluate(
    suite: EvalSuite[Any],
    items: Sequence[EvalItem],
    models: list[str],
    base_url: str,
    api_key: str,
    *,
    max_tokens: int,
    budget_s: float,
    progress: Progress,
    concurrency: int = 1,
) -> dict[str, Any]:
    """Runs `items` on each model at `base_url` (…/v1) and returns the report: settings, summaries, results."""
    client = _client(base_url, api_key)
    deadline = time.monotonic() + budget_s
    report: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "max_tokens": max_tokens,
        "gate": {**GATE, "model": models[0]},
        "models": {},
    }
    for model in models:
        progress(f"evaluating {model} on {len(items)} items")
        started = time.perf_counter()
        results = run_items(
            client,
            suite,
            model,
            items,
            max_tokens=max_tokens,
            deadline=deadline,
            progress=progress,
            concurrency=concurrency,
        )
        report["models"][model] = {
            "seconds": round(time.perf_counter() - started, 1),
            "summary": summarise(results),
            "results": [asdict(r) for r in results],
        }
    failures = gate(report["models"][models[0]]["summary"])
    report["gate"].update(passed=not failures, failures=failures)
    return report


def write_outputs(report: dict[str, Any], json_path: Path | None, html_path: Path | None) -> None:
    for path, text in ((json_path, json.dumps(report, indent=2) + "\n"), (html_path, None)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text if text is not None else render_html(report))


# -- command line ---------------------------------------------------------------------------------------------


def add_eval_parser(subparsers: Any) -> Any:
    """Adds `eval grounding` (run a golden set); returns the `eval` command's subparsers, for the commands that
    make the sets (`eval golden`, added by the command line)."""
    kinds = subparsers.add_parser("eval", help="Offline evals on golden sets.").add_subparsers(
        dest="eval_command", required=True
    )
    g = kinds.add_parser("grounding", help="Grounding accuracy, hallucinated objects, POPE and guardrail, gated.")
    g.add_argument("--set", type=Path, help="Golden JSONL (default: the suite's heldout.jsonl; smoke: smoke.jsonl).")
    g.add_argument(
        "--model", action="append", help="Model to evaluate, repeatable; the first is gated (default large)."
    )
    g.add_argument("--base-url", help="A running server's /v1 URL (default: start the embedded server).")
    g.add_argument("--api-key", help="Its API key (default $TESSERA_API_KEY or $OPENAI_API_KEY).")
    g.add_argument("--json", type=Path, help="Write the full results here.")
    g.add_argument("--report", type=Path, help="Write an HTML report here.")
    g.add_argument("--limit", type=int, help="Evaluate only the first N items.")
    g.add_argument(
        "--concurrency", type=int, default=4, help="Items in flight at once (default 4; answers are greedy either way)."
    )
    g.add_argument(
        "--guardrail",
        choices=["off", "score", "flag"],
        default="flag",
        help="The embedded server's tenant policy (default flag: every answer carries its verdict).",
    )
    g.add_argument(
        "--max-tokens", type=int, help=f"Answer length (default {DEFAULT_MAX_TOKENS}; smoke {SMOKE_MAX_TOKENS})."
    )
    g.add_argument(
        "--budget-s", type=float, help="Stop sending items after this many seconds (default 4 h; smoke 600)."
    )
    g.add_argument(
        "--smoke",
        action="store_true",
        help="The small set on the small model: checks every step runs and the metrics are well-formed, not the gate.",
    )
    return kinds


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run_grounding(
    args: argparse.Namespace, launch: Launcher, suite: EvalSuite[Any], progress: Progress
) -> dict[str, Any]:
    path = args.set or suite.default_set(args.smoke)
    items = suite.read(path)[: args.limit] if args.limit else suite.read(path)
    if not items:
        raise EvalFailure(f"{path} holds no items")
    models = args.model or [SMOKE_MODEL if args.smoke else DEFAULT_MODEL]
    max_tokens = args.max_tokens or (SMOKE_MAX_TOKENS if args.smoke else DEFAULT_MAX_TOKENS)
    budget = args.budget_s or (SMOKE_BUDGET_S if args.smoke else DEFAULT_BUDGET_S)
    run = {"max_tokens": max_tokens, "budget_s": budget, "progress": progress, "concurrency": args.concurrency}
    progress(f"{len(items)} items from {path}")
    if args.base_url:
        key = args.api_key or os.environ.get("TESSERA_API_KEY") or os.environ.get("OPENAI_API_KEY") or ""
        report = evaluate(suite, items, models, args.base_url, key, **run)  # type: ignore[arg-type]
    else:
        progress(f"starting the embedded server (pools {', '.join(models)})")
        with launch(models, progress, guardrail=args.guardrail) as server:
            report = evaluate(suite, items, models, server.base + "/v1", server.key, **run)  # type: ignore[arg-type]
    report.update(set=str(path), smoke=bool(args.smoke))
    return report


def run_eval(args: argparse.Namespace, launch: Launcher, suite: EvalSuite[Any], progress: Progress = _stderr) -> None:
    """Runs `tessera eval grounding`; exits non-zero below the gate (or, with --smoke, on any malformed step)."""
    try:
        report = _run_grounding(args, launch, suite, progress)
        write_outputs(report, args.json, args.report)
        for model, run in report["models"].items():
            o = run["summary"]["overall"]
            progress(
                f"{model}: accuracy {cell(o, 'accuracy')}, hallucinated objects {cell(o, 'hallucination_rate')}, "
                f"POPE {cell(o, 'pope.accuracy')}, guardrail P/R {cell(o, 'guardrail.precision')}/"
                f"{cell(o, 'guardrail.recall')}"
            )
            if args.smoke:
                expected = len(suite.read(Path(report["set"]))[: args.limit or None])
                check_well_formed(run["summary"], expected)
    except EvalFailure as exc:
        raise SystemExit(f"eval grounding failed: {exc}") from exc
    if args.smoke:
        progress("smoke: every step ran and the metrics are well-formed (the gate is not applied)")
    elif not report["gate"]["passed"]:
        raise SystemExit("below the gate: " + "; ".join(report["gate"]["failures"]))
