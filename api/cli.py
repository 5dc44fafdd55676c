"""The `tessera` command: `serve` (the embedded default with no arguments), `models build-demo`, `bench`, `eval`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from api.settings import Settings


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
            if value is not None:
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

    from api.app import create_app
    from api.state import AppState

    def announce(state: AppState) -> None:
        url = f"http://{settings.host}:{settings.port}/v1"
        models = ", ".join(f"{p.name} ({'+'.join(p.modalities)})" for p in state.pools.pools)
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

    app = create_app(settings, on_ready=announce)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        lifespan="on",
        timeout_graceful_shutdown=10,
        # Forwarding headers are believed from the configured proxies only; uvicorn's own default would trust
        # any peer on 127.0.0.1.
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=settings.trusted_proxies,
    )


def build_demo(args: argparse.Namespace) -> None:
    from serving.demo_models import DEMO_SPECS, build_demo_checkpoints

    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    root = settings.demo_dir()
    paths = build_demo_checkpoints(root, args.names or None, force=args.force)
    for name, path in paths.items():
        print(f"{name}: {path}\n  {DEMO_SPECS[name].description}")


def train_demo(args: argparse.Namespace) -> None:
    import dataclasses
    import json

    from grounding.curriculum import parse_kind_weights, parse_mix_weights
    from grounding.train_output import export, quick_eval
    from grounding.training import TrainConfig, Trainer
    from serving.demo_models import DEMO_WEIGHTS_DIR, build_demo_checkpoints

    try:
        kind_weights = parse_kind_weights(args.kind_weights) if args.kind_weights else None
    except ValueError as exc:
        raise SystemExit(f"error: --kind-weights: {exc}") from None
    try:
        joint_mix = parse_mix_weights(args.mix_weights) if args.mix_weights else None
    except ValueError as exc:
        raise SystemExit(f"error: --mix-weights: {exc}") from None
    if args.enlarge_share is not None and not 0.0 <= args.enlarge_share <= 1.0:
        raise SystemExit(f"error: --enlarge-share must lie in [0, 1], got {args.enlarge_share}")
    if args.lone_share is not None and not 0.0 <= args.lone_share <= 1.0:
        raise SystemExit(f"error: --lone-share must lie in [0, 1], got {args.lone_share}")
    if args.spread_beyond is not None and args.spread_beyond < 0:
        raise SystemExit(f"error: --spread-beyond must be 0 or more, got {args.spread_beyond}")
    if args.audio_variety is not None and not 0.0 <= args.audio_variety <= 1.0:
        raise SystemExit(f"error: --audio-variety must lie in [0, 1], got {args.audio_variety}")
    if args.lr is not None and not 0.0 < args.lr <= 0.1:
        raise SystemExit(f"error: --lr must lie in (0, 0.1], got {args.lr}")
    if args.joint_vision_blocks is not None and args.joint_vision_blocks < 0:
        raise SystemExit(f"error: --joint-vision-blocks must be 0 or more, got {args.joint_vision_blocks}")
    settings = Settings()
    work = args.work_dir or settings.data_dir / "train"
    pairs: tuple[tuple[str, Any], ...] = (
        ("steps", args.steps),
        ("batch", args.batch),
        ("vision_steps", args.vision_steps),
        ("audio_steps", args.audio_steps),
        ("init", str(args.init) if args.init else None),
        ("init_audio", False if args.audio_from_whisper else None),
        ("kind_weights", kind_weights),
        ("joint_mix", joint_mix),
        ("enlarge_share", args.enlarge_share),
        ("joint_lone_share", args.lone_share),
        ("spread_beyond", args.spread_beyond),
        ("audio_variety", args.audio_variety),
        ("lr", args.lr),
        ("joint_vision_blocks", args.joint_vision_blocks),
        ("seed", args.seed),
    )
    overrides: dict[str, Any] = {k: v for k, v in pairs if v is not None}
    config = dataclasses.replace(TrainConfig(pool=args.pool), **overrides)
    base = build_demo_checkpoints(work / "base", [args.pool], grounded=False)[args.pool]
    try:
        trainer = Trainer(base, work / args.pool, config, progress=lambda line: print(line, flush=True))
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    trainer.train()
    path = export(trainer, args.out or DEMO_WEIGHTS_DIR)
    print(f"trained weights: {path}")
    if args.eval_items:
        check = quick_eval(trainer, args.eval_items)
        print(json.dumps(check, indent=2))
        manifest = path.with_suffix(".json")
        recorded = json.loads(manifest.read_text())
        recorded["quick_eval"] = {"transformers, first held-out items per mix": args.eval_items, **check}
        manifest.write_text(json.dumps(recorded, indent=2) + "\n")


def calibrate_demo(args: argparse.Namespace) -> None:
    from grounding.calibration import recalibrate
    from grounding.train_output import WEIGHTS_NAME
    from serving.demo_models import DEMO_WEIGHTS_DIR, build_demo_checkpoints

    weights = DEMO_WEIGHTS_DIR / WEIGHTS_NAME.format(pool=args.pool)
    if not weights.is_file():
        raise SystemExit(f"error: {weights} does not exist; train the pool first (tessera models train-demo)")
    checkpoint = build_demo_checkpoints(Settings().demo_dir(), [args.pool])[args.pool]
    calibration = recalibrate(weights, checkpoint)
    agreeing = calibration.agreement
    print(
        f"label head margin {calibration.margin}: scenes agreeing {agreeing[0.0]:.1%} -> "
        f"{agreeing[calibration.margin]:.1%}; rewrote {weights} (build-demo rebuilds the checkpoint)"
    )


def _directory(settings: Settings) -> Any:
    from api.state import setup_tenancy
    from tenancy.store import open_database

    db = open_database(settings.resolved_database_url())
    directory, _, _ = setup_tenancy(settings.model_copy(update={"demo_tenant": None}), db)
    return directory


def manage(args: argparse.Namespace) -> None:
    from serving.errors import TesseraError

    directory = _directory(Settings())
    try:
        if args.command == "tenants" and args.tenants_command == "create":
            tenant = directory.create_tenant(args.name, tokens_per_minute=args.tpm, concurrency=args.concurrency)
            print(f"created tenant {tenant.name} ({tenant.id}): {args.tpm} tokens/min, {args.concurrency} concurrent")
        elif args.command == "tenants":
            for tenant, quota in directory.tenants():
                limits = f"{quota.tokens_per_minute} tpm, {quota.concurrent_requests} concurrent" if quota else ""
                print(f"{tenant.name}\t{tenant.id}\t{tenant.status}\t{limits}")
        else:
            tenant = directory.tenant(args.tenant)
            models = [m for m in (args.models or "").split(",") if m] or None
            issued = directory.issue_key(tenant.id, name=args.name, admin=args.admin, allowed_models=models)
            print(f"issued key {issued.prefix}… ({issued.key_id}) for tenant {tenant.name}; it is shown only once:")
            print(issued.key)
    except TesseraError as exc:
        raise SystemExit(f"error: {exc.message}") from exc


def _eval_server(models: list[str], progress: Any, guardrail: str = "flag") -> Any:
    """A live embedded server of the demo pools `models` for `tessera eval`, launched as the benches launch theirs;
    its tenant's grounding guardrail is `guardrail` (flag: every answer carries its verdict)."""
    from bench.server import live_server
    from serving.demo_models import build_demo_checkpoints

    demo_dir = Settings().demo_dir()
    build_demo_checkpoints(demo_dir, models, progress=progress)
    return live_server(demo_dir, [{"name": m} for m in models], progress, quota={"grounding_policy": guardrail})


def _models_parser(sub: Any) -> None:
    models = sub.add_parser("models", help="Manage checkpoints.").add_subparsers(dest="models_command", required=True)
    demo = models.add_parser("build-demo", help="Build the demo checkpoints offline (seeded, deterministic).")
    demo.add_argument("names", nargs="*", help="Which demo checkpoints (default: all).")
    demo.add_argument("--force", action="store_true", help="Rebuild even if present.")
    demo.add_argument("--data-dir", type=Path, help="Data directory (TESSERA_DATA_DIR, default .tessera).")
    train = models.add_parser(
        "train-demo",
        help="Train a demo pool's vision and audio towers (and LoRA) on the grounding world; resumes when re-run.",
    )
    train.add_argument("--pool", default="large", help="Which demo checkpoint (default: large).")
    train.add_argument("--vision-steps", type=int, default=None, help="Steps of the vision stage (towers only).")
    train.add_argument("--audio-steps", type=int, default=None, help="Steps of the audio stage (towers only).")
    train.add_argument(
        "--steps", type=int, default=None, help="Steps of the joint stage (LoRA and both towers' tails)."
    )
    train.add_argument("--batch", type=int, default=None, help="Items per joint step (default: the recipe's).")
    train.add_argument("--work-dir", type=Path, help="Base checkpoint and resumable state (default .tessera/train).")
    train.add_argument("--out", type=Path, help="Where the trained weights go (default: serving/demo_weights).")
    train.add_argument(
        "--init", type=Path, help="Start from an earlier run's <pool>-grounding.safetensors, not from nothing."
    )
    train.add_argument(
        "--audio-from-whisper",
        action="store_true",
        help="With --init: the audio tower starts again from Whisper's own weights instead of the earlier run's.",
    )
    train.add_argument(
        "--kind-weights",
        help="How often the joint stage asks each question kind, e.g. describe=3,which_shapes=2 (others weigh 1).",
    )
    train.add_argument(
        "--mix-weights",
        help="How many joint steps in each round go to each mix, e.g. image=5,audio=1,image+audio=2 (default 3:3:2).",
    )
    train.add_argument(
        "--enlarge-share",
        type=float,
        default=None,
        help="Share of the vision stage's scenes that hold one large shape, drawn up to 3 times bigger (default 0.25).",
    )
    train.add_argument(
        "--lone-share",
        type=float,
        default=None,
        help="Share of the joint stage's image items asked about one large shape drawn up to 3 times bigger "
        "(default 0).",
    )
    train.add_argument(
        "--spread-beyond",
        type=float,
        default=None,
        help="A vision-stage shape drawn more than this many times the world's size speaks its words from every cell "
        "it covers, not its centre alone (default 0: never).",
    )
    train.add_argument(
        "--audio-variety",
        type=float,
        default=None,
        help="Share of the audio stage's speech said in other words around the world's (default 0.3).",
    )
    train.add_argument(
        "--lr",
        type=float,
        default=None,
        help="Peak learning rate of every stage (default 1e-3); a continuation from --init does better lower.",
    )
    train.add_argument(
        "--joint-vision-blocks",
        type=int,
        default=None,
        help="How many of the vision tower's last blocks train in the joint stage (default 0: the merger only).",
    )
    train.add_argument(
        "--seed",
        type=int,
        default=None,
        help="Training seed (default 1); a run from --init draws fresh items with another.",
    )
    train.add_argument("--eval-items", type=int, default=60, help="Held-out items per mix to check at the end.")
    calibrate = models.add_parser(
        "calibrate-demo",
        help="Re-choose the label head's 'nothing here' margin of a demo pool's committed weights (no training).",
    )
    calibrate.add_argument("--pool", default="large", help="Which demo checkpoint (default: large).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tessera", description="Tessera: OpenAI-compatible multimodal server.")
    sub = parser.add_subparsers(dest="command")
    _serve_parser(sub)
    _models_parser(sub)
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
    from bench.cli import add_bench_parser
    from grounding.eval import add_eval_parser

    add_bench_parser(sub)
    add_eval_parser(sub)
    args = parser.parse_args(argv)
    command = args.command or "serve"
    if command == "serve":
        if args.command is None:
            args = parser.parse_args(["serve"])
        settings = settings_from_args(args)
        _configure_logging(settings.log_level)
        serve(settings)
    elif command == "models" and args.models_command == "train-demo":
        _configure_logging("WARNING")
        train_demo(args)
    elif command == "models" and args.models_command == "calibrate-demo":
        _configure_logging("WARNING")
        calibrate_demo(args)
    elif command == "models":
        _configure_logging("INFO")
        build_demo(args)
    elif command in ("tenants", "keys"):
        _configure_logging("WARNING")
        manage(args)
    elif command == "bench":
        from bench.cli import run_bench

        _configure_logging("WARNING")
        run_bench(args)
    elif command == "eval":
        from grounding.eval import run_eval

        _configure_logging("WARNING")
        run_eval(args, launch=_eval_server)
