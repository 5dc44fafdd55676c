"""`tessera models`: the product's checkpoint commands (`inspect`), to which the demo factory adds its own."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from serving.encoders.families import EnginePath, FamilyAdapter, Medium, architecture_of, family_for

SAMPLE_IMAGE = (640, 480)
SAMPLE_CLIP_S = 10.0
PLACES = {
    "gateway": "encoded in the gateway",
    "features": "as log-mel features from the gateway (the engine runs the tower)",
    "engine": "encoded by the engine",
}


def add_models_parser(sub: Any) -> Any:
    """Adds the `models` group with `inspect`; returns its subparsers, for the demo factory's commands."""
    models = sub.add_parser("models", help="Inspect and build checkpoints.").add_subparsers(
        dest="models_command", required=True
    )
    inspect = models.add_parser(
        "inspect",
        help="What Tessera does with a checkpoint: its architecture and adapter, where each medium is encoded, "
        "token counts, and the `vllm serve` line of a remote replica.",
    )
    inspect.add_argument("path", type=Path, help="Checkpoint directory (config.json, weights, processor).")
    inspect.add_argument("--name", default=None, help="Served model name in the replica command (default: folder).")
    inspect.add_argument("--json", action="store_true", help="Print the findings as JSON.")
    return models


def inspect_checkpoint(path: Path, name: str | None = None) -> dict[str, Any]:
    """What `tessera models inspect` reports; loads the config, the tokenizer and vLLM's processor, no weights."""
    from transformers import AutoConfig

    if not (path / "config.json").is_file():
        raise SystemExit(f"error: {path} is not a checkpoint directory (no config.json)")
    config = AutoConfig.from_pretrained(path)
    architecture = architecture_of(config)
    family = family_for(architecture)
    media_config = getattr(config, "thinker_config", None) or config
    media: list[Medium] = []
    if getattr(media_config, "vision_config", None) is not None:
        media.append("image")
    if getattr(media_config, "audio_config", None) is not None:
        media.append("audio")
    modalities = ["text", *media]
    paths: tuple[EnginePath, ...] = ("inprocess", "remote")
    encoding = {p: {m: _place(family, m, p) for m in media} for p in paths}
    tokens: dict[str, int] = {}
    if len(modalities) > 1:
        from serving.encoders.counting import MediaTokenCounter

        counter = MediaTokenCounter.for_checkpoint(path)
        try:
            if "image" in modalities:
                tokens[f"image {SAMPLE_IMAGE[0]}x{SAMPLE_IMAGE[1]}"] = counter.image(*SAMPLE_IMAGE)
            if "audio" in modalities:
                tokens[f"audio {SAMPLE_CLIP_S:.0f} s"] = counter.audio_seconds(SAMPLE_CLIP_S)
        finally:
            counter.close()
    remote_raw = any(where == "engine" for where in encoding["remote"].values())
    return {
        "path": str(path),
        "architecture": architecture,
        "adapter": family.name if family is not None else None,
        "modalities": modalities,
        "encoding": encoding,
        "tokens": tokens,
        "embedding_cache": {p: [m for m, where in encoding[p].items() if where != "engine"] for p in paths},
        "replica_command": _replica_command(path, name or path.name, keep_processor_cache=remote_raw),
    }


def _place(family: FamilyAdapter | None, medium: Medium, path: EnginePath) -> str:
    """Where a medium is encoded, as /v1/models says it (serving.pools.encoding_places)."""
    if family is None or not family.encodes(medium, path):
        return "engine"
    return "features" if medium == "audio" and family.audio_input == "features" else "gateway"


def _replica_command(path: Path, name: str, *, keep_processor_cache: bool) -> str:
    """The `vllm serve` line of a remote replica of this checkpoint, with the flags a remote pool needs. A replica
    that encodes media itself keeps its processor cache, so a repeated medium (which the picker sends back to it) is
    not processed again."""
    from bench.replicas import replica_command

    command = replica_command(path, name, 8000)
    command[0] = "vllm"
    command[command.index("--host") + 1] = "0.0.0.0"  # noqa: S104 (a replica serves the gateways on its network)
    if keep_processor_cache:
        at = command.index("--mm-processor-cache-gb")
        del command[at : at + 2]
    return shlex.join(command)


def run_inspect(args: argparse.Namespace) -> None:
    found = inspect_checkpoint(args.path, args.name)
    if args.json:
        print(json.dumps(found, indent=2))
        return
    adapter = found["adapter"] or "none (the engine encodes every medium)"
    print(f"checkpoint:    {found['path']}")
    print(f"architecture:  {found['architecture']}")
    print(f"adapter:       {adapter}")
    print(f"modalities:    {', '.join(found['modalities'])}")
    for path_name, label in (("inprocess", "in process"), ("remote", "remote pool")):
        places = ", ".join(f"{m} {PLACES[where]}" for m, where in found["encoding"][path_name].items()) or "text only"
        cached = ", ".join(found["embedding_cache"][path_name]) or "nothing"
        print(f"{label + ':':<15}{places}; embedding cache: {cached}")
    for medium, count in found["tokens"].items():
        print(f"tokens:        {medium}: {count}")
    print(f"replica:       {found['replica_command']}")
