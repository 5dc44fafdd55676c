"""The evals' one way of asking a server many things at once: in the jobs' order, a few at a time, until time
runs out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")


def ask_in_order(
    jobs: Sequence[Job],
    ask: Callable[[Job], Result],
    *,
    expired: Callable[[], bool],
    concurrency: int = 1,
    each: Callable[[int, Result, list[Result]], None] = lambda number, result, done: None,
    stopped: Callable[[int], None] = lambda done: None,
) -> list[Result]:
    """`ask(job)` for each job, `concurrency` at a time, results in the jobs' order. A job not started before
    `expired()` is skipped, and so is everything after it: `stopped(results so far)` is called once. `each(number,
    result, results so far)` follows every result (for progress)."""

    def one(job: Job) -> tuple[bool, Result | None]:
        return (False, None) if expired() else (True, ask(job))

    results: list[Result] = []
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for number, (asked, result) in enumerate(pool.map(one, jobs), 1):
            if not asked:
                stopped(len(results))
                break
            results.append(result)  # type: ignore[arg-type]
            each(number, result, results)  # type: ignore[arg-type]
    return results
