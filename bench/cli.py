"""The `tessera bench` subcommands: their arguments (`add_bench_parser`) and dispatch (`run_bench`)."""

from __future__ import annotations

import argparse
import traceback
from pathlib import Path
from typing import Any

SMOKE_HELP = "Tiny counts that still run every step, live server included (a minute or two), to check the bench works."


def add_bench_parser(subparsers: Any) -> None:
    """Adds `bench pipeline|latency|tenancy|structured|fleet|batch|load|grounding|cost`, each with `--json PATH`
    (required) and `--smoke`."""
    bench = subparsers.add_parser("bench", help="Benchmarks (each writes JSON; --smoke for a quick check).")
    kinds = bench.add_subparsers(dest="bench_command", required=True)
    pipe = kinds.add_parser("pipeline", help="Encoder pools, embedding cache and admission vs the plain path.")
    latency = kinds.add_parser("latency", help="Server start-up, TTFT and decode rate per model and modality.")
    latency.add_argument("--repeats", type=int, help="Timed requests per model and modality (default 3; smoke 1).")
    latency.add_argument("--max-tokens", type=int, help="Completion length (default 32; smoke 4).")
    tenancy = kinds.add_parser("tenancy", help="What tenant auth, quotas and metering add per request.")
    tenancy.add_argument("--requests", type=int, help="Timed requests per side (default 100; smoke 5).")
    tenancy.add_argument("--redis-url", default=None, help="Redis for the rate limits (default db 4 on localhost).")
    structured = kinds.add_parser("structured", help="TPOT with and without response_format (guided decoding).")
    fleet = kinds.add_parser("fleet", help="Endpoint picker vs round robin on two vLLM replicas, open-loop load.")
    fleet.add_argument(
        "--replicas", help="Comma-separated replica URLs to measure on (default: start two local replicas)."
    )
    fleet.add_argument("--requests", type=int, help="Timed requests per policy and round (default 600; smoke 12).")
    fleet.add_argument("--rate", type=float, help="Poisson arrivals per second (default 2.5; smoke 1.5).")
    fleet.add_argument("--rounds", type=int, help="Alternated rounds, picker then round robin (default 3; smoke 1).")
    fleet.add_argument(
        "--replica-kv-mib", type=float, help="KV cache of each replica the bench starts (default 64; smoke 16)."
    )
    fleet.add_argument("--plot", type=Path, help="Also draw the TTFT CDF of both policies (every round) to this PNG.")
    grounding = kinds.add_parser(
        "grounding", help="What the grounding guardrail adds under flag: label head, judge and both, side by side."
    )
    grounding.add_argument("--rounds", type=int, help="Rounds of one request per side (default 15; smoke 2).")
    batch = kinds.add_parser("batch", help="Interactive TTFT with a batch draining beside it; the batch's throughput.")
    batch.add_argument("--rate", type=float, help="Interactive req/s (default: half the goodput the bench measures).")
    batch.add_argument("--lines", type=int, help="Lines in the batch (default 500; smoke 40).")
    batch.add_argument("--batch-concurrency", type=int, help="The server's TESSERA_BATCH_CONCURRENCY (default 8).")
    load = kinds.add_parser(
        "load", help="Goodput ladder (TTFT p99 <= 250 ms, no errors) of bare vllm serve and Tessera, side by side."
    )
    load.add_argument("--rates", help="Comma-separated ladder of req/s (default 4,8,16,24,32,48,64).")
    load.add_argument("--repeats", type=int, help="Ladders per server, alternating servers (default 3; smoke 1).")
    load.add_argument("--plot", type=Path, help="Also draw TTFT p99 against rate for both servers (PNG).")
    cost = kinds.add_parser(
        "cost", help="Engine seconds per request of the small and large demo pools on the mixed workload (r)."
    )
    cost.add_argument("--rate", type=float, help="Poisson arrivals per second (default 0.25; smoke 1).")
    cost.add_argument("--requests", type=int, help="Requests per pool and repeat (default 20; smoke 4).")
    cost.add_argument("--repeats", type=int, help="Runs per pool, alternating pools (default 3; smoke 1).")
    for p in (pipe, latency, tenancy, structured, fleet, batch, load, grounding, cost):
        p.add_argument("--json", type=Path, required=True, help="Where to write the results.")
        p.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def run_bench(args: argparse.Namespace) -> None:
    """Runs the chosen bench; a bench that cannot measure what it promised exits non-zero with the reason."""
    from bench.common import BenchFailure
    from config.settings import Settings

    settings = Settings()
    try:
        if args.bench_command == "pipeline":
            from bench.pipeline import run_pipeline_bench

            run_pipeline_bench(args.json, settings, smoke=args.smoke)
        elif args.bench_command == "structured":
            from bench.structured import run_structured_bench

            run_structured_bench(args.json, settings, smoke=args.smoke)
        elif args.bench_command == "grounding":
            from bench.grounding import run_grounding_bench

            run_grounding_bench(args.json, settings, smoke=args.smoke, rounds=args.rounds)
        elif args.bench_command == "latency":
            from bench.latency import run_latency_bench

            run_latency_bench(args.json, settings, smoke=args.smoke, repeats=args.repeats, max_tokens=args.max_tokens)
        elif args.bench_command == "batch":
            from bench.batch import run_batch_bench

            run_batch_bench(
                args.json,
                settings,
                smoke=args.smoke,
                rate=args.rate,
                lines=args.lines,
                batch_concurrency=args.batch_concurrency,
            )
        elif args.bench_command == "load":
            from bench.load import run_load_bench

            rates = [float(r) for r in (args.rates or "").split(",") if r.strip()] or None
            run_load_bench(args.json, settings, smoke=args.smoke, rates=rates, repeats=args.repeats, plot=args.plot)
        elif args.bench_command == "cost":
            from bench.cost import run_cost_bench

            run_cost_bench(
                args.json, settings, smoke=args.smoke, rate=args.rate, requests=args.requests, repeats=args.repeats
            )
        elif args.bench_command == "fleet":
            from bench.fleet import run_fleet_bench

            run_fleet_bench(
                args.json,
                settings,
                smoke=args.smoke,
                replicas=[u for u in (args.replicas or "").split(",") if u.strip()] or None,
                requests=args.requests,
                rate=args.rate,
                rounds=args.rounds,
                replica_kv_mib=args.replica_kv_mib,
                plot=args.plot,
            )
        else:
            from bench.tenancy import DEFAULT_REDIS_URL, run_tenancy_bench

            run_tenancy_bench(
                args.json,
                settings,
                smoke=args.smoke,
                requests=args.requests,
                redis_url=args.redis_url or DEFAULT_REDIS_URL,
            )
    except BenchFailure as exc:
        # The notes (a server log's tail) come first and the reason last, so the reason is the last line a
        # build log shows.
        notes = "".join(f"{n}\n" for n in getattr(exc, "__notes__", []))
        raise SystemExit(f"{notes}bench {args.bench_command} failed: {exc}") from exc
    except Exception as exc:
        traceback.print_exception(exc)  # with the server log's tail as its note
        raise SystemExit(f"bench {args.bench_command} failed: {type(exc).__name__}: {exc}") from exc
