"""`tessera eval grounding`'s command line: its flags, the run (an embedded server or a given one), the lines it
prints, and its exit status against the gate."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from grounding.eval.harness import (
    DEFAULT_BUDGET_S,
    DEFAULT_FORCED,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    SMOKE_BUDGET_S,
    SMOKE_FORCED,
    SMOKE_MAX_TOKENS,
    SMOKE_MODEL,
    EvalSuite,
    Launcher,
    Progress,
    evaluate,
    write_outputs,
)
from grounding.eval.metrics import EvalFailure, check_well_formed
from grounding.eval.report import cell
from grounding.eval.routing_cli import add_routing_parser


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
        "--every",
        type=int,
        default=1,
        help="Evaluate every K-th item (default 1: all); the golden sets cycle their question kinds every six items, "
        "so take K prime to 6 (5, 7) to keep every kind.",
    )
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
        "--evidence",
        choices=["label_head", "judge", "both"],
        help="The embedded server's tenant grounding evidence (default both: each verdict also gives what the label "
        "head and the judge would each have scored alone, so the report has all three; judge with --calibrate-judge, "
        "so every claim's P(yes) is on its verdict).",
    )
    g.add_argument(
        "--forced",
        type=int,
        help="Also make the model give the right answer and a one-fact-wrong answer of this many items, to measure "
        f"the guardrail's recall and false flags on them (default {DEFAULT_FORCED}; smoke {SMOKE_FORCED}; 0: none).",
    )
    g.add_argument(
        "--judge-threshold",
        type=float,
        help="The embedded server's TESSERA_GROUNDING_JUDGE_THRESHOLD, for yes/no questions, and for open ones "
        "unless --judge-open-threshold is given (default: the server's: the judge checkpoint's calibrated "
        "thresholds, else 0.5); take it from a --calibrate-judge run.",
    )
    g.add_argument(
        "--judge-open-threshold",
        type=float,
        help="The embedded server's TESSERA_GROUNDING_JUDGE_OPEN_THRESHOLD: the claimed value's probability in the "
        "judge's answer to an open question (a count, colour or place seen; a day, hour, count or colour heard) at "
        "which the claim holds.",
    )
    g.add_argument(
        "--calibrate-judge",
        action="store_true",
        help="Choose the judge's thresholds (yes/no and open questions) on this set (a calibration split, never a "
        "held-out set) and print them as settings and as the checkpoint's grounding/judge.json.",
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
    add_routing_parser(kinds)
    return kinds


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _chosen(items: Any, args: argparse.Namespace) -> Any:
    """The items `--every` and `--limit` choose."""
    return items[:: args.every][: args.limit or None]


def _run_grounding(
    args: argparse.Namespace, launch: Launcher, suite: EvalSuite[Any], progress: Progress
) -> dict[str, Any]:
    path = args.set or suite.default_set(args.smoke)
    if args.every < 1:
        raise EvalFailure(f"--every must be 1 or more, got {args.every}")
    items = _chosen(suite.read(path), args)
    if not items:
        raise EvalFailure(f"{path} holds no items")
    models = args.model or [SMOKE_MODEL if args.smoke else DEFAULT_MODEL]
    max_tokens = args.max_tokens or (SMOKE_MAX_TOKENS if args.smoke else DEFAULT_MAX_TOKENS)
    budget = args.budget_s or (SMOKE_BUDGET_S if args.smoke else DEFAULT_BUDGET_S)
    if args.calibrate_judge and path.stem in suite.heldout:
        raise EvalFailure(f"{path} is a held-out set: calibrate on a calibration split, never on held-out items")
    if args.calibrate_judge and args.evidence not in (None, "judge"):
        # under both, a claim the label head checked is its own, so the verdict leaves out the judge's P(yes) for it
        raise EvalFailure("--calibrate-judge reads every claim's P(yes): run it with --evidence judge (its default)")
    args.evidence = args.evidence or ("judge" if args.calibrate_judge else "both")
    forced = args.forced if args.forced is not None else (SMOKE_FORCED if args.smoke else DEFAULT_FORCED)
    run = {
        "max_tokens": max_tokens,
        "budget_s": budget,
        "progress": progress,
        "concurrency": args.concurrency,
        "forced": forced,
    }
    progress(f"{len(items)} items from {path}")
    if args.base_url:
        key = args.api_key or os.environ.get("TESSERA_API_KEY") or os.environ.get("OPENAI_API_KEY") or ""
        report = evaluate(suite, items, models, args.base_url, key, **run)  # type: ignore[arg-type]
    else:
        progress(f"starting the embedded server (pools {', '.join(models)})")
        launched = {
            "guardrail": args.guardrail,
            "evidence": args.evidence,
            "judge_thresholds": (args.judge_threshold, args.judge_open_threshold),
        }
        with launch(models, progress, **launched) as server:
            report = evaluate(suite, items, models, server.base + "/v1", server.key, **run)  # type: ignore[arg-type]
    report.update(set=str(path), smoke=bool(args.smoke), every=args.every, limit=args.limit)
    return report


def _print_forced(model: str, run: dict[str, Any], progress: Progress) -> None:
    figures = (run.get("forced") or {}).get("figures")
    if not figures:
        return
    for name in ("served", "label_head", "judge"):
        row = figures["overall"].get(name)
        if row:
            progress(
                f"{model}: forced answers ({figures['usable']} usable of {figures['sent']}), {name}: recall "
                f"{cell(row, 'recall')} on wrong answers, false flags {cell(row, 'false_flag_rate')} on right ones"
            )


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
            _print_forced(model, run, progress)
            if args.smoke:
                expected = len(_chosen(suite.read(Path(report["set"])), args))
                check_well_formed(run["summary"], expected)
            if args.calibrate_judge:
                chosen = (run.get("judge_calibration") or {}).get("chosen")
                if chosen is None:
                    raise EvalFailure("no verdict carried the judge's P(yes): run with --evidence judge or both")
                yes_no, open_ = chosen["threshold"], chosen["open_threshold"]
                progress(
                    f"{model}: judge thresholds {yes_no} (yes/no) and {open_} (open) (recall {cell(chosen, 'recall')}, "
                    f"false flags {cell(chosen, 'false_flag_rate')}): TESSERA_GROUNDING_JUDGE_THRESHOLD={yes_no} "
                    f"TESSERA_GROUNDING_JUDGE_OPEN_THRESHOLD={open_}, or "
                    f'{{"threshold": {yes_no}, "open_threshold": {open_}}} in grounding/judge.json beside the '
                    "checkpoint"
                )
    except EvalFailure as exc:
        raise SystemExit(f"eval grounding failed: {exc}") from exc
    if args.smoke:
        progress("smoke: every step ran and the metrics are well-formed (the gate is not applied)")
    elif not report["gate"]["passed"]:
        raise SystemExit("below the gate: " + "; ".join(report["gate"]["failures"]))
