"""transformers reference runs on the demo checkpoints: greedy float32, the ground truth for the server."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from tests.conftest import MODELS_DIR


@functools.cache
def load(name: str) -> tuple[Any, Any]:
    from transformers import AutoProcessor, Qwen2_5OmniForConditionalGeneration

    path = str(MODELS_DIR / name)
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return model.thinker, AutoProcessor.from_pretrained(path)


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as the chat template takes them: media parts become bare markers."""
    out = []
    for m in messages:
        content = m["content"]
        if isinstance(content, list):
            kinds = {"image_url": "image", "input_audio": "audio"}
            content = [
                {"type": "text", "text": p["text"]} if p["type"] == "text" else {"type": kinds[p["type"]]}
                for p in content
            ]
        out.append({"role": m["role"], "content": content})
    return out


def processed(name: str, messages: list[dict[str, Any]], images: list[Any], audios: list[np.ndarray]) -> Any:
    _, processor = load(name)
    prompt = processor.tokenizer.apply_chat_template(
        template_messages(messages), tokenize=False, add_generation_prompt=True
    )
    kwargs: dict[str, Any] = {"text": [prompt], "return_tensors": "pt"}
    if images:
        kwargs["images"] = images
    if audios:
        kwargs["audio"] = audios
        kwargs["sampling_rate"] = 16000
    return processor(**kwargs)


def greedy(
    name: str, messages: list[dict[str, Any]], images: list[Any], audios: list[np.ndarray], max_new_tokens: int
) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) from transformers, ignoring EOS as the server does with ignore_eos."""
    thinker, _ = load(name)
    inputs = processed(name, messages, images, audios)
    with torch.no_grad():
        out = thinker.generate(
            **inputs, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=10**9, pad_token_id=0
        )
    prompt = inputs["input_ids"][0].tolist()
    return prompt, out[0][len(prompt) :].tolist()


def media_token_counts(name: str, prompt_ids: list[int]) -> dict[str, int]:
    thinker, _ = load(name)
    cfg = thinker.config
    return {"image": prompt_ids.count(cfg.image_token_index), "audio": prompt_ids.count(cfg.audio_token_index)}


def greedy_logprobs(
    name: str, messages: list[dict[str, Any]], tokens: list[int], top: int = 3
) -> list[tuple[float, list[float]]]:
    """For each of `tokens` continuing the prompt: its log probability under the model's raw logits, and the
    `top` highest log probabilities at that position."""
    thinker, _ = load(name)
    inputs = processed(name, messages, [], [])
    prompt = inputs["input_ids"]
    ids = torch.cat([prompt, torch.tensor([tokens])], dim=1)
    with torch.no_grad():
        logits = thinker(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    out = []
    for i, token in enumerate(tokens):
        row = logprobs[prompt.shape[1] - 1 + i]
        out.append((float(row[token]), [float(v) for v in torch.topk(row, top).values]))
    return out
