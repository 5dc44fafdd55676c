"""`tessera eval routing`: both pools answer every item of the routing splits once, and every routing policy is
scored offline on those same answers (grounding.eval.routing_policies).

The items come from the command line as a `RoutingSuite` (the demo's: demo.routing_set), as the grounding eval's
do. Each item goes to the weak and the strong pool by name through the real server path at temperature 0, under a
tenant whose guardrail flags (`flag`) on `both` evidences, so every media answer carries its grounding score by
each evidence. Answers, verdicts and latencies are appended to a JSONL cache as they come, one line per (split,
pool, item), so a run cut short resumes where it stopped and a second run asks nothing again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic

from grounding.eval.harness import EvalSuite, Item, Progress, run_items
from grounding.eval.metrics import EvalFailure, ItemResult
from grounding.eval.routing_policies import Costs, Pair
from grounding.eval.routing_report import report
from grounding.judge import planned_questions

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class RoutingSuite(Generic[Item]):
    """The routing splits: `items(split, per_slice)` (None: the split's full size), and the grounding suite that
    renders their media and judges their answers (text items included)."""

    items: Callable[[str, int | None], Sequence[Item]]
    media: EvalSuite[Item]


def read_cache(path: Path) -> dict[tuple[str, str, str], ItemResult]:
    """(split, model, item id) -> result, from the lines a run appended (a torn last line is dropped)."""
    found: dict[tuple[str, str, str], ItemResult] = {}
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        split = row.pop("split")
        result = ItemResult(**row)
        found[(split, result.model, result.id)] = result
    return found


def collect(
    client: Any,
    suite: RoutingSuite[Any],
    splits: dict[str, Sequence[Any]],
    models: tuple[str, str],
    cache: Path,
    *,
    max_tokens: int,
    deadline: float,
    progress: Progress,
    concurrency: int = 1,
    chunk: int = 16,
) -> dict[tuple[str, str, str], ItemResult]:
    """Every item of every split on both pools, reading the cache first and appending each chunk of new answers to
    it; a failed request is cached too (as a wrong answer with its error), except where it timed out."""
    done = read_cache(cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    for split, items in splits.items():
        for model in models:
            todo = [i for i in items if (split, model, i.id) not in done]
            if not todo:
                continue
            progress(f"{split}: {len(todo)} of {len(items)} items to ask {model}")
            for start in range(0, len(todo), chunk):
                if time.monotonic() > deadline:
                    raise EvalFailure(
                        f"the time budget ran out with {split} unanswered on {model}; run again to resume"
                    )
                part = todo[start : start + chunk]
                results = run_items(
                    client,
                    suite.media,
                    model,
                    part,
                    max_tokens=max_tokens,
                    deadline=deadline,
                    progress=progress,
                    concurrency=concurrency,
                )
                with cache.open("a") as out:
                    for result in results:
                        if result.error and "Timeout" in result.error:
                            continue  # asked again next run
                        out.write(json.dumps({"split": split, **asdict(result)}) + "\n")
                        done[(split, model, result.id)] = result
    return done


def judge_calls(result: ItemResult) -> int:
    """The judge's questions about an answer, one engine call each on the judge pool: every question it asks of
    every claim in every medium of the item (the judge pool takes them all here), as `grounding.judge` plans them.
    Under `both` evidence the label head decides the claims it reads, but the judge was asked about them too."""
    media = set(result.mix.split("+")) - {"text"}
    if not media or result.error is not None:
        return 0
    return len(planned_questions(result.answer, media)[1])


def pairs_of(
    items: Sequence[Any], answers: dict[tuple[str, str, str], ItemResult], split: str, models: tuple[str, str]
) -> list[Pair]:
    """The items both pools answered, as pairs (an item either pool lacks is left out, and counted by the caller)."""
    weak_name, strong_name = models
    pairs = []
    for item in items:
        weak, strong = answers.get((split, weak_name, item.id)), answers.get((split, strong_name, item.id))
        if weak is None or strong is None:
            continue
        scores: dict[str, float | None] = dict(weak.evidence_scores or {})
        scores["both"] = weak.score
        pairs.append(
            Pair(
                id=item.id,
                slice=item.mix,
                kind=item.kind,
                question=item.question,
                prompt_tokens=weak.prompt_tokens or 0,
                weak_correct=weak.correct,
                strong_correct=strong.correct,
                weak_latency_s=weak.latency_s,
                strong_latency_s=strong.latency_s,
                weak_scores=scores,
                judge_calls=judge_calls(weak),
            )
        )
    return pairs


def evaluate_routing(
    client: Any,
    suite: RoutingSuite[Any],
    sizes: dict[str, int | None],
    models: tuple[str, str],
    cache: Path,
    costs: Costs,
    *,
    max_tokens: int,
    budget_s: float,
    progress: Progress,
    concurrency: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """Asks what the cache lacks, then scores every policy; the report also says what each pool got right."""
    splits = {split: suite.items(split, sizes.get(split)) for split in SPLITS}
    deadline = time.monotonic() + budget_s
    answers = collect(
        client,
        suite,
        splits,
        models,
        cache,
        max_tokens=max_tokens,
        deadline=deadline,
        progress=progress,
        concurrency=concurrency,
    )
    paired = {split: pairs_of(items, answers, split, models) for split, items in splits.items()}
    missing = {split: len(splits[split]) - len(paired[split]) for split in SPLITS}
    if any(missing.values()) or not paired["test"]:
        raise EvalFailure(f"items without both answers: {missing}")
    failed = sum(1 for r in answers.values() if r.error)
    result = report(paired["train"], paired["dev"], paired["test"], costs, seed=seed)
    result.update(
        models={"weak": models[0], "strong": models[1]},
        failed_requests=failed,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        cache=str(cache),
    )
    return result
