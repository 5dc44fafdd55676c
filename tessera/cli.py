"""The `tessera` command: `serve` (the embedded default with no arguments), `tenants`, `keys`, `bench`, `eval`,
`models inspect` (tessera.models_cli), and the demo factory's `models build-demo`/`train-demo`/`calibrate-demo`
(demo.cli)."""

from __future__ import annotations

import argparse
import getpass
import logging
import socket
import sys
from pathlib import Path
from typing import Any

from bench.cli import add_bench_parser
from config.settings import Settings
from demo.cli import add_golden_parser, add_models_parser, run_golden, run_models
from grounding.eval.cli import add_eval_parser
from tessera.models_cli import add_models_parser as add_product_models_parser
from tessera.models_cli import run_inspect


def _serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="Serve the OpenAI-compatible API (embedded default without arguments).")
    p.add_argument("--host", help="Address to listen on (TESSERA_HOST, default 127.0.0.1).")
    p.add_argument("--port", type=int, help="Port (TESSERA_PORT, default 8000).")
    p.add_argument("--data-dir", type=Path, help="SQLite file and demo checkpoints (TESSERA_DATA_DIR).")
    p.add_argument("--database-url", help="SQLAlchemy URL (TESSERA_DATABASE_URL); default SQLite in data dir.")
    p.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="Point a pool at a checkpoint directory, e.g. --pool large=/models/Qwen2.5-Omni-7B. "
        "A new NAME adds a pool.",
    )
    p.add_argument("--dtype", help="Weights dtype for every pool (default float32).")
    p.add_argument("--max-model-len", type=int, help="Context length for every pool.")
    p.add_argument("--tensor-parallel-size", type=int, help="Tensor parallelism for every pool (GPU).")
    p.add_argument("--gpu-memory-utilization", type=float, help="GPU memory fraction for every pool (GPU).")
    p.add_argument("--kv-cache-gib", type=float, help="KV cache GiB for every pool (CPU).")
    p.add_argument("--no-enforce-eager", action="store_true", help="Allow graph compilation (slower start).")


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {k: getattr(args, k) for k in ("host", "port", "data_dir", "database_url") if getattr(args, k)}
    settings = Settings(**overrides)
    pools = {p.name: p for p in settings.pools}
    for entry in args.pool:
        name, sep, path = entry.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--pool expects NAME=PATH, got {entry!r}")
        pool = pools.get(name)
        if pool is None:
            pool = type(settings.pools[0])(name=name)
            settings.pools.append(pool)
            pools[name] = pool
        pool.model = path
    for pool in settings.pools:
        for flag in ("dtype", "max_model_len", "tensor_parallel_size", "gpu_memory_utilization", "kv_cache_gib"):
            value = getattr(args, flag)
            if value is not None and (pool.kind == "chat" or flag in ("dtype", "tensor_parallel_size")):
                setattr(pool, flag, value)
        if args.no_enforce_eager:
            pool.enforce_eager = False
    return settings


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for noisy in ("httpx", "vllm", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def serve(settings: Settings) -> None:
    import uvicorn

    from demo.checkpoints import resolve_demo_pools
    from tessera.app import create_app
    from tessera.pools import preflight
    from tessera.state import AppState

    def announce(state: AppState) -> None:
        url = f"http://{settings.host}:{settings.port}/v1"
        models = ", ".join(
            [f"{p.name} ({'+'.join(p.modalities)})" for p in state.pools.pools]
            + [f"{t.name} ({t.kind})" for t in state.pools.tasks]
        )
        print(f"\nTessera is serving {models}\n  base_url: {url}", flush=True)
        if state.demo_key and settings.api_key:
            # The operator chose this key; it is not repeated into logs.
            print(f"  api key:  TESSERA_API_KEY ({state.demo_key[:6]}…), tenant '{settings.demo_tenant}'", flush=True)
        elif state.demo_key:
            origin = "issued now" if state.demo_key_new else "issued earlier"
            print(f"  api key:  {state.demo_key}  ({origin}; kept in {settings.data_dir / 'demo-key'})", flush=True)
        console = f"http://{settings.host}:{settings.port}/console/"
        admin = "" if settings.admin_key else "  (admin area: set TESSERA_ADMIN_KEY or issue a key with --admin)"
        print(f"  console:  {console}  (sign in with the api key){admin}", flush=True)

    try:
        preflight(settings)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    app = create_app(settings, on_ready=announce, checkpoints=resolve_demo_pools)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        lifespan="on",
        timeout_graceful_shutdown=10,
        timeout_keep_alive=max(1, round(settings.keep_alive_s)),
        # Forwarding headers are believed from the configured proxies only; uvicorn's own default would trust
        # any peer on 127.0.0.1.
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=settings.trusted_proxies,
    )


def _directory(settings: Settings) -> Any:
    from tenancy.store import open_database
    from tessera.state import setup_tenancy

    db = open_database(settings.resolved_database_url())
    directory, _, _ = setup_tenancy(settings.model_copy(update={"demo_tenant": None}), db)
    return directory


def manage(args: argparse.Namespace) -> None:
    from serving.errors import TesseraError

    directory = _directory(Settings())
    actor = f"cli:{getpass.getuser()}@{socket.gethostname()}"[:128]  # the audit log's who, for an operator's shell
    try:
        if args.command == "tenants" and args.tenants_command == "create":
            tenant = directory.create_tenant(
                args.name, tokens_per_minute=args.tpm, concurrency=args.concurrency, actor=actor
            )
            print(f"created tenant {tenant.name} ({tenant.id}): {args.tpm} tokens/min, {args.concurrency} concurrent")
        elif args.command == "tenants":
            for tenant, quota in directory.tenants():
                limits = f"{quota.tokens_per_minute} tpm, {quota.concurrent_requests} concurrent" if quota else ""
                print(f"{tenant.name}\t{tenant.id}\t{tenant.status}\t{limits}")
        else:
            tenant = directory.tenant(args.tenant)
            models = [m for m in (args.models or "").split(",") if m] or None
            issued = directory.issue_key(
                tenant.id, name=args.name, admin=args.admin, allowed_models=models, actor=actor
            )
            print(f"issued key {issued.prefix}… ({issued.key_id}) for tenant {tenant.name}; it is shown only once:")
            print(issued.key)
    except TesseraError as exc:
        raise SystemExit(f"error: {exc.message}") from exc


def _eval_server(
    models: list[str],
    progress: Any,
    guardrail: str = "flag",
    evidence: str = "both",
    judge_thresholds: tuple[float | None, float | None] = (None, None),
    routing_policy: str | None = None,
    env: dict[str, str] | None = None,
) -> Any:
    """A live embedded server of the demo pools `models` for `tessera eval`, launched as the benches launch theirs;
    its tenant's grounding guardrail is `guardrail` (flag: every answer carries its verdict), on `evidence`, its
    judge holds claims at `judge_thresholds` (yes/no, open; None: the server's default), its routing policy is
    `routing_policy` (None: the default), and `env` adds server settings."""
    from bench.server import live_server
    from demo.checkpoints import build_demo_checkpoints

    demo_dir = Settings().demo_dir()
    build_demo_checkpoints(demo_dir, models, progress=progress)
    quota = {"grounding_policy": guardrail, "grounding_evidence": evidence}
    if routing_policy is not None:
        quota["routing_policy"] = routing_policy
    names = ("TESSERA_GROUNDING_JUDGE_THRESHOLD", "TESSERA_GROUNDING_JUDGE_OPEN_THRESHOLD")
    settings = {name: str(t) for name, t in zip(names, judge_thresholds, strict=True) if t is not None}
    settings |= env or {}
    return live_server(demo_dir, [{"name": m} for m in models], progress, env=settings, quota=quota)


def _run_eval(args: argparse.Namespace) -> None:
    """`tessera eval golden | grounding | routing`."""
    _configure_logging("WARNING")
    if args.eval_command == "golden":
        run_golden(args)
    elif args.eval_command == "routing":
        from demo.suite import routing_suite
        from grounding.eval.routing_cli import run_routing

        run_routing(args, launch=_eval_server, suite=routing_suite())
    else:
        from demo.suite import golden_suite
        from grounding.eval.cli import run_eval

        run_eval(args, launch=_eval_server, suite=golden_suite())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tessera", description="Tessera: OpenAI-compatible multimodal server.")
    sub = parser.add_subparsers(dest="command")
    _serve_parser(sub)
    add_models_parser(add_product_models_parser(sub))
    tenants = sub.add_parser("tenants", help="Manage tenants.").add_subparsers(dest="tenants_command", required=True)
    tc = tenants.add_parser("create", help="Create a tenant.")
    tc.add_argument("name")
    tc.add_argument("--tpm", type=int, default=100_000, help="Tokens per minute (default 100000).")
    tc.add_argument("--concurrency", type=int, default=16, help="Concurrent requests (default 16).")
    tenants.add_parser("list", help="List tenants and their quotas.")
    keys = sub.add_parser("keys", help="Manage API keys.").add_subparsers(dest="keys_command", required=True)
    kc = keys.add_parser("create", help="Issue a key; it is printed once, on the last line.")
    kc.add_argument("--tenant", required=True, help="Tenant name or id.")
    kc.add_argument("--name", default="", help="A label for the key.")
    kc.add_argument("--models", default=None, help="Comma-separated models the key may use (default: all).")
    kc.add_argument("--admin", action="store_true", help="An admin key (for /admin and the console).")
    add_bench_parser(sub)
    add_golden_parser(add_eval_parser(sub))
    args = parser.parse_args(argv)
    command = args.command or "serve"
    if command == "serve":
        if args.command is None:
            args = parser.parse_args(["serve"])
        settings = settings_from_args(args)
        _configure_logging(settings.log_level)
        serve(settings)
    elif command == "models" and args.models_command == "inspect":
        _configure_logging("WARNING")
        run_inspect(args)
    elif command == "models":
        _configure_logging("INFO" if args.models_command == "build-demo" else "WARNING")
        run_models(args)
    elif command in ("tenants", "keys"):
        _configure_logging("WARNING")
        manage(args)
    elif command == "bench":
        from bench.cli import run_bench

        _configure_logging("WARNING")
        run_bench(args)
    elif command == "eval":
        _run_eval(args)
