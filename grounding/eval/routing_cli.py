"""`tessera eval routing`'s command line: its flags, the run (an embedded server of both pools, or a given one), the
table it prints, its JSON and its cost-quality curve (a PNG drawn with Pillow)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from grounding.eval.harness import Launcher, Progress, _client
from grounding.eval.metrics import EvalFailure
from grounding.eval.routing import RoutingSuite, evaluate_routing
from grounding.eval.routing_live import confirm, served_policy
from grounding.eval.routing_policies import Costs
from serving.prompt_router import PromptRouter, save_router

# What `tessera bench cost` measured (docs/measurements.md): a request to the five-layer `small` costs 0.276 of one
# to `large` in engine seconds, and one judge question on `large` about an answer `large` did not give (a cascade's
# gate: the whole prompt prefilled for its first question) 0.394 of one.
DEFAULT_COST_RATIO = 0.276
DEFAULT_JUDGE_CALL = 0.394
SMOKE_SIZES = {"train": 2, "dev": 1, "test": 1}
DEFAULT_CACHE = Path("artifacts/routing/answers.jsonl")


def add_routing_parser(kinds: Any) -> None:
    r = kinds.add_parser(
        "routing", help="Both pools answer the routing splits once; every routing policy is scored on those answers."
    )
    r.add_argument("--weak", default="small", help="The weak pool (default small).")
    r.add_argument("--strong", default="large", help="The strong pool (default large).")
    r.add_argument("--base-url", help="A running server's /v1 URL (default: start the embedded server).")
    r.add_argument(
        "--api-key",
        help="Its API key (default $TESSERA_API_KEY or $OPENAI_API_KEY); its tenant's guardrail should be `flag` on "
        "`both` evidences, or the cascades have no scores to read.",
    )
    for split, size in (("train", 120), ("dev", 80), ("test", 200)):
        r.add_argument(f"--{split}", type=int, help=f"{split} items per slice (default {size}).")
    r.add_argument("--answers", type=Path, default=DEFAULT_CACHE, help=f"The answers' cache (default {DEFAULT_CACHE}).")
    r.add_argument("--cost-ratio", type=float, default=DEFAULT_COST_RATIO, help="r: a weak request's cost.")
    r.add_argument("--judge-call", type=float, default=DEFAULT_JUDGE_CALL, help="One judge question's cost.")
    r.add_argument("--json", type=Path, help="Write the report here.")
    r.add_argument("--plot", type=Path, help="Draw the cost-quality curves here (PNG).")
    r.add_argument(
        "--router-out",
        type=Path,
        help="Write the router fitted on train, its threshold chosen on dev, here: the `router` policy's file "
        "(serve it as router.json in the models directory, or point TESSERA_ROUTER_PATH at it).",
    )
    r.add_argument(
        "--confirm",
        action="store_true",
        help="Then serve the chosen policy with the router just written (--router-out) on the embedded server and "
        "ask each test item through `auto` once, to confirm the offline figures live.",
    )
    r.add_argument("--concurrency", type=int, default=2, help="Items in flight at once (default 2).")
    r.add_argument("--max-tokens", type=int, help="Answer length (default 48; smoke 16).")
    r.add_argument("--budget-s", type=float, help="Stop asking after this many seconds (default 4 h; smoke 600).")
    r.add_argument(
        "--smoke", action="store_true", help="Two train items, one dev and one test a slice: every step runs."
    )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_routing(
    args: argparse.Namespace, launch: Launcher, suite: RoutingSuite[Any], progress: Progress = _stderr
) -> dict[str, Any]:
    """Runs `tessera eval routing`; returns the report (also written with --json)."""
    if not 0 < args.cost_ratio <= 1:
        raise SystemExit(f"eval routing failed: --cost-ratio must lie in (0, 1], got {args.cost_ratio}")
    if args.confirm and (args.base_url or not args.router_out):
        raise SystemExit(
            "eval routing failed: --confirm serves the router it writes on a server of its own: give --router-out, "
            "and no --base-url"
        )
    sizes: dict[str, int | None] = {
        s: getattr(args, s) if getattr(args, s) is not None else (SMOKE_SIZES[s] if args.smoke else None)
        for s in ("train", "dev", "test")
    }
    run = {
        "max_tokens": args.max_tokens or (16 if args.smoke else 48),
        "budget_s": args.budget_s or (600.0 if args.smoke else 4 * 3600.0),
        "progress": progress,
        "concurrency": args.concurrency,
    }
    models = (args.weak, args.strong)
    costs = Costs(weak=args.cost_ratio, judge_call=args.judge_call)
    try:
        if args.base_url:
            key = args.api_key or os.environ.get("TESSERA_API_KEY") or os.environ.get("OPENAI_API_KEY") or ""
            found = evaluate_routing(_client(args.base_url, key), suite, sizes, models, args.answers, costs, **run)  # type: ignore[arg-type]
        else:
            progress(f"starting the embedded server (pools {', '.join(models)})")
            with launch(list(models), progress, guardrail="flag", evidence="both") as server:
                client = _client(server.base + "/v1", server.key)
                found = evaluate_routing(client, suite, sizes, models, args.answers, costs, **run)  # type: ignore[arg-type]
    except EvalFailure as exc:
        raise SystemExit(f"eval routing failed: {exc}") from exc
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(found, indent=2) + "\n")
    if args.plot:
        draw_curves(args.plot, found)
    if args.router_out:
        save_router(PromptRouter.from_json(found["router"]), args.router_out)
        progress(f"router written to {args.router_out} (threshold {found['router']['threshold']:.3f})")
    if args.confirm:
        found["live"] = _confirm(args, launch, suite, found, costs, sizes, run)
        if args.json:
            args.json.write_text(json.dumps(found, indent=2) + "\n")
    for line in table_lines(found):
        progress(line)
    return found


def _confirm(
    args: argparse.Namespace,
    launch: Launcher,
    suite: RoutingSuite[Any],
    found: dict[str, Any],
    costs: Costs,
    sizes: dict[str, int | None],
    run: dict[str, Any],
) -> dict[str, Any]:
    """The chosen policy served with the router just written, every test item through `auto` once."""
    progress = run["progress"]
    served = served_policy(found["chosen"])
    if served is None:
        progress(f"not confirmed live: '{found['chosen']}' has no served policy")
        return {"served_policy": None}
    models = [found["models"]["weak"], found["models"]["strong"]]
    progress(f"confirming live: routing policy '{served}' with {args.router_out}")
    env = {"TESSERA_ROUTER_PATH": str(Path(args.router_out).resolve())}
    with launch(models, progress, guardrail="score", evidence="label_head", routing_policy=served, env=env) as server:
        live = confirm(
            _client(server.base + "/v1", server.key),
            suite.media,
            suite.items("test", sizes.get("test")),
            found,
            costs,
            max_tokens=run["max_tokens"],
            deadline=time.monotonic() + run["budget_s"],
            progress=progress,
            concurrency=run["concurrency"],
        )
    progress(
        f"live: accuracy {live.get('accuracy')} (offline {live.get('offline', {}).get('accuracy')}), cost "
        f"{live.get('cost')}, decided as offline on {live.get('decided_as_offline')} of the items"
    )
    return {"served_policy": served, **live}


def table_lines(found: dict[str, Any]) -> list[str]:
    """The policies on test, one line each, and the targets."""
    lines = [f"{'policy':<44} {'accuracy':>8} {'cost':>6} {'strong':>7} {'p95 s':>6}"]
    for name, row in found["policies"].items():
        o = row["overall"]
        p95 = o.get("p95_latency_s")
        lines.append(
            f"{name:<44} {o['accuracy']:>8.3f} {o['cost']:>6.3f} {o['strong_share']:>7.3f} "
            f"{'' if p95 is None else f'{p95:>6.2f}'}"
        )
    gap = found["gap_to_strong"]
    lines.append(
        f"chosen on dev: {found['chosen']}; gap to always-strong {gap['mean']:+.3f} "
        f"(95% CI {gap['ci95'][0]:+.3f} to {gap['ci95'][1]:+.3f}); targets met: {found['targets']['met']}"
    )
    return lines


def draw_curves(out: Path, found: dict[str, Any]) -> None:
    """Accuracy against cost for each swept policy, with the fixed policies as points."""
    from PIL import Image, ImageDraw

    width, height, left, right, top, bottom = 760, 480, 60, 20, 40, 60
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    accs = [p[2] for c in found["curves"].values() for p in c["points"]]
    accs += [r["overall"]["accuracy"] for r in found["policies"].values()]
    low, high = max(0.0, min(accs) - 0.05), min(1.0, max(accs) + 0.05)
    high = high if high > low else low + 0.1
    x_max = max(2.0, max((p[1] for c in found["curves"].values() for p in c["points"]), default=1.0))

    def xy(cost: float, acc: float) -> tuple[float, float]:
        x = left + cost / x_max * (width - left - right)
        return x, height - bottom - (acc - low) / (high - low) * (height - top - bottom)

    draw.text(
        (left, 12), "Routing policies on the test split: accuracy against cost (always-strong = 1.0)", fill="black"
    )
    draw.text((width // 2 - 60, height - 22), "cost per request", fill="black")
    draw.rectangle([xy(0, high), xy(x_max, low)], outline="black")
    for i in range(5):
        acc = low + (high - low) * i / 4
        draw.text((8, xy(0, acc)[1] - 6), f"{acc:.2f}", fill="black")
        cost = x_max * i / 4
        draw.text((xy(cost, low)[0] - 10, height - bottom + 6), f"{cost:.2f}", fill="black")
    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b")
    for n, (name, curve) in enumerate(found["curves"].items()):
        colour = colours[n % len(colours)]
        points = sorted((p[1], p[2]) for p in curve["points"])
        draw.line([xy(c, a) for c, a in points], fill=colour, width=2)
        draw.text((width - right - 330, top + 10 + 16 * n), f"{name} (APGR {curve['apgr']})", fill=colour)
    for name, row in found["policies"].items():
        o = row["overall"]
        x, y = xy(o["cost"], o["accuracy"])
        draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill="black")
        draw.text((x + 5, y - 12), name.split(" (")[0], fill="black")
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
