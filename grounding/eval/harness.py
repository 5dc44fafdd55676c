"""`tessera eval grounding`: golden items through the real server path, scored, sliced, reported and gated.

What is evaluated comes in as an `EvalSuite` the command line hands over: the golden items, their media rendered
as bytes, and the judge of an answer. Each item becomes one chat completion sent with the official `openai` SDK at
temperature 0: the item's media parts in its `media_order` (the image as a PNG data URL `image_url`, the clip as
base64 WAV `input_audio`), then the question as text. The guardrail's verdict is read from the response when the
server attaches one (a `grounding` object with `flagged` or `passed`, on the completion or its choice, or a
`refusal` on the message); without one, guardrail metrics are null, never guessed.
"""

from __future__ import annotations

import base64
import functools
import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from grounding.eval.forced import calibrate_judge, forced_figures, forced_items, run_forced, usable_forced
from grounding.eval.metrics import GATE, ItemResult, gate, summarise
from grounding.eval.parallel import ask_in_order
from grounding.eval.report import render_html
from grounding.eval.verdicts import guardrail_details, guardrail_flag, verdict_evidence

Progress = Callable[[str], None]
DEFAULT_MODEL, SMOKE_MODEL = "large", "small"
DEFAULT_MAX_TOKENS, SMOKE_MAX_TOKENS = 96, 16
DEFAULT_BUDGET_S, SMOKE_BUDGET_S = 4 * 3600.0, 600.0
REQUEST_TIMEOUT_S = 300.0
DEFAULT_FORCED, SMOKE_FORCED = 300, 3  # items whose right and wrong answers are forced
FORCED_MAX_TOKENS = 160  # room for the longest forced answer (a scene of four shapes described)


class Server(Protocol):
    base: str  # http://host:port, without /v1
    key: str


Launcher = Callable[..., AbstractContextManager[Server]]  # (models, progress, guardrail=policy, evidence=...)


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
    wrong_answer: Callable[[Item], str] | None = None  # the item's answer with one fact changed (eval_forced)
    heldout: frozenset[str] = frozenset()  # names of the held-out sets (file stems): never calibrated on

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


def _result(
    suite: EvalSuite[Any],
    item: EvalItem,
    model: str,
    answer: str,
    latency: float,
    error: str | None,
    completion: dict[str, Any] | None = None,
    forced: str | None = None,
) -> ItemResult:
    data = completion or {}
    details = guardrail_details(data)
    evidence_scores, threshold, checked = verdict_evidence(data)
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
        flagged=guardrail_flag(data) if completion is not None else None,
        latency_s=round(latency, 3),
        error=error,
        unsupported=details[0],
        score=details[1],
        evidence_scores=evidence_scores,
        threshold=threshold,
        checked=checked,
        forced=forced,
        prompt_tokens=(data.get("usage") or {}).get("prompt_tokens"),
    )


def ask(
    client: Any,
    suite: EvalSuite[Any],
    model: str,
    item: EvalItem,
    max_tokens: int,
    forced: tuple[str, str] | None = None,
) -> ItemResult:
    """One item through the server; a refused or failed request is recorded as a wrong answer with its error.
    `forced` ("right" or "wrong", the answer) makes the model give that answer (vLLM's `structured_outputs` choice),
    so the guardrail is measured on answers the eval chose."""
    import openai

    extra: dict[str, Any] = {}
    if forced is not None:
        extra = {"extra_body": {"structured_outputs": {"choice": [forced[1]]}}}
        max_tokens = max(max_tokens, FORCED_MAX_TOKENS)
    started = time.perf_counter()
    try:
        completion = client.chat.completions.create(
            model=model, messages=request_messages(item, suite), temperature=0, max_tokens=max_tokens, **extra
        )
    except openai.OpenAIError as exc:
        failure = f"{type(exc).__name__}: {exc}"[:500]
        return _result(suite, item, model, "", time.perf_counter() - started, failure, forced=forced and forced[0])
    data = completion.model_dump()
    answer = (data["choices"][0]["message"].get("content") or "") if data.get("choices") else ""
    elapsed = time.perf_counter() - started
    return _result(suite, item, model, answer, elapsed, None, data, forced=forced and forced[0])


def _ask_forced(
    client: Any, suite: EvalSuite[Any], model: str, max_tokens: int, item: EvalItem, answer: tuple[str, str]
) -> ItemResult:
    return ask(client, suite, model, item, max_tokens, forced=answer)


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

    def each(number: int, result: ItemResult, done: list[ItemResult]) -> None:
        mark = "ok " if result.correct else ("ERR" if result.error else "-- ")
        right = sum(r.correct for r in done)
        said = result.answer[:60]
        progress(f"  {model} [{number}/{len(items)}] {mark} {result.id} {result.kind}: {said!r} ({right} right)")

    return ask_in_order(
        items,
        lambda item: ask(client, suite, model, item, max_tokens),
        expired=lambda: time.monotonic() > deadline,
        concurrency=concurrency,
        each=each,
        stopped=lambda done: progress(f"  {model}: time budget spent after {done} of {len(items)} items"),
    )


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
    forced: int = 0,
) -> dict[str, Any]:
    """Runs `items` on each model at `base_url` (…/v1) and returns the report: settings, summaries, results; with
    `forced`, also that many items' right and one-fact-wrong answers, made (grounding.eval.forced)."""
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
        chosen = forced_items(items, forced)
        if chosen and suite.wrong_answer is not None:
            progress(f"forcing right and wrong answers of {len(chosen)} items on {model}")
            made = run_forced(
                functools.partial(_ask_forced, client, suite, model, max_tokens),
                chosen,
                suite.wrong_answer,
                progress=progress,
                concurrency=concurrency,
                expired=lambda: time.monotonic() > deadline,
            )
            report["models"][model]["forced"] = {
                "figures": forced_figures(made),
                "results": [asdict(r) for r in made],
            }
            report["models"][model]["judge_calibration"] = calibrate_judge([*results, *usable_forced(made)])
    first = report["models"][models[0]]
    failures = gate(first["summary"], (first.get("forced") or {}).get("figures"))
    report["gate"].update(passed=not failures, failures=failures)
    return report


def write_outputs(report: dict[str, Any], json_path: Path | None, html_path: Path | None) -> None:
    for path, text in ((json_path, json.dumps(report, indent=2) + "\n"), (html_path, None)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text if text is not None else render_html(report))
