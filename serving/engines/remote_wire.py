"""What goes over the wire to a remote vLLM replica and back (`serving.engines.remote` holds the engine that sends it).

Out: vLLM `SamplingParams` fields as JSON (`sampling_body`), and the prompt with each media placeholder expanded
plus Tessera's encoder outputs as vLLM `MultiModalKwargsItem`s, each named by its embedding-cache key
(`features_body`). Back: the replica's stream chunks turned into engine deltas (`StreamState`), and its error
bodies into messages, telling a replica whose engine is gone (tried elsewhere) from a request that failed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from serving.engines.base import EngineDelta, EngineRequest, GenerationParams, TokenLogprob
from serving.errors import InternalFailure


def engine_gone(message: str) -> bool:
    """Whether a replica's error says its engine is gone, rather than that this request failed: only then is
    the replica ejected and the request tried elsewhere, so one bad request cannot eject a whole pool."""
    lowered = message.lower()
    return any(sign in lowered for sign in ("enginecore", "enginedead", "engine dead", "not running", "shutting down"))


class ReplicaFailed(Exception):
    """The replica failed before anything of the answer reached the client: another replica may take it."""


def sampling_body(p: GenerationParams) -> dict[str, Any]:
    """vLLM `SamplingParams` fields as JSON, with the same meaning as `serving.engines.vllm_io.sampling_params`."""
    body: dict[str, Any] = {
        "n": p.n,
        "max_tokens": p.max_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": p.top_k or 0,
        "presence_penalty": p.presence_penalty,
        "frequency_penalty": p.frequency_penalty,
        "repetition_penalty": p.repetition_penalty,
        "min_tokens": p.min_tokens,
        "ignore_eos": p.ignore_eos,
    }
    if p.seed is not None:
        body["seed"] = p.seed
    if p.stop:
        body["stop"] = list(p.stop)
    if p.logprobs is not None:
        body["logprobs"] = p.logprobs
    if p.logit_bias:
        body["logit_bias"] = {str(k): v for k, v in p.logit_bias.items()}
    if p.structured is not None:
        body["structured_outputs"] = p.structured.vllm_fields()
    return body


def media_hashes(kind: str, request: EngineRequest, items: Sequence[Any]) -> list[str]:
    """Each medium's identity on the replica: the embedding-cache key (encoder and content) where the request
    carries it, else a digest of the encoder output itself."""
    keys = request.media_keys.get(kind, [])
    if len(keys) == len(items):
        return list(keys)
    out = []
    for item in items:
        tensor = item.embeds if kind == "image" else item.features
        out.append(hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest())
    return out


def features_body(
    token_ids: list[int], media_token_ids: dict[str, int], merge_size: int, request: EngineRequest
) -> tuple[list[int], dict[str, Any] | None]:
    """The prompt with each media placeholder expanded, and the encoder outputs as vLLM kwargs items in the
    Qwen2.5-Omni thinker's layout (the architecture Tessera's encoder pools serve). Blocking (tensor
    serialization): call it off the event loop."""
    images = request.image_embeds or []
    audios = request.audio_features or []
    if request.images or request.audios:
        raise InternalFailure("a remote pool takes encoder outputs, not raw media", code="remote_raw_media")
    if not images and not audios:
        return token_ids, None
    import torch
    from transformers import BatchFeature
    from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import encode_mm_kwargs_item
    from vllm.model_executor.models.qwen2_5_omni_thinker import create_qwen2_5_omni_thinker_field_factory
    from vllm.multimodal.inputs import MultiModalKwargsItems

    sizes = {"image": [e.tokens for e in images], "audio": [a.tokens for a in audios]}
    expanded: list[int] = []
    placeholders: dict[str, list[dict[str, int]]] = {"image": [], "audio": []}
    seen = {"image": 0, "audio": 0}
    by_token = {tok: kind for kind, tok in media_token_ids.items()}
    for tok in token_ids:
        kind = by_token.get(tok)
        if kind is None or seen[kind] >= len(sizes[kind]):
            expanded.append(tok)
            continue
        length = sizes[kind][seen[kind]]
        placeholders[kind].append({"offset": len(expanded), "length": length})
        expanded.extend([tok] * length)
        seen[kind] += 1
    if seen["image"] != len(images) or seen["audio"] != len(audios):
        raise InternalFailure("the prompt's media placeholders do not match its media", code="placeholder_mismatch")

    tensors: dict[str, Any] = {}
    hashes: dict[str, list[str]] = {}
    if images:
        tensors["image_embeds"] = torch.cat([e.embeds for e in images])
        tensors["image_grid_thw"] = torch.tensor([e.grid_thw for e in images], dtype=torch.long)
        hashes["image"] = media_hashes("image", request, images)
    if audios:
        lengths = torch.tensor([a.frames for a in audios], dtype=torch.long)
        mask = torch.zeros(len(audios), int(lengths.max()), dtype=torch.long)
        for i, n in enumerate(lengths.tolist()):
            mask[i, :n] = 1
        tensors["input_audio_features"] = torch.cat([a.features for a in audios], dim=1)
        tensors["feature_attention_mask"] = mask
        tensors["audio_feature_lengths"] = lengths
        hashes["audio"] = media_hashes("audio", request, audios)
    # The model's own field layout (which tensors split per item, which stay on the CPU), as its processor
    # would have produced them.
    fields = create_qwen2_5_omni_thinker_field_factory(merge_size)(tensors)
    items = MultiModalKwargsItems.from_hf_inputs(BatchFeature(tensors), fields)
    data = {kind: [encode_mm_kwargs_item(it) for it in items[kind]] for kind in hashes}
    kinds = list(hashes)
    features = {
        "mm_hashes": hashes,
        "mm_placeholders": {k: placeholders[k] for k in kinds},
        "kwargs_data": data,
    }
    return expanded, features


def logprobs_of(raw: Any) -> tuple[TokenLogprob, ...] | None:
    if not raw or not isinstance(raw, dict):
        return None
    out = []
    for entry in raw.get("content") or []:
        top = tuple((str(t["token"]), float(t["logprob"])) for t in entry.get("top_logprobs") or [])
        out.append(TokenLogprob(str(entry["token"]), float(entry["logprob"]), top))
    return tuple(out)


def error_message(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except ValueError:
        return body.decode(errors="replace")[:500]
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)
    return str(error)


class StreamState:
    """Turns the replica's stream chunks into engine deltas. A choice's finishing delta is held back until the
    usage chunk that follows it, which carries the prompt's cached-token count."""

    def __init__(self, pool: str, with_logprobs: bool, restartable: bool = False) -> None:
        self.pool = pool
        self.with_logprobs = with_logprobs
        self.restartable = restartable
        self.first = True  # no delta yet
        self.prompt_ids: list[int] = []
        self.held: list[EngineDelta] = []

    def feed(self, chunk: dict[str, Any]) -> list[EngineDelta]:
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            if self.retryable and engine_gone(message):
                raise ReplicaFailed(message)
            raise InternalFailure(f"the engine of model '{self.pool}' failed: {message}", code="engine_error")
        if chunk.get("prompt_token_ids"):
            self.prompt_ids = list(chunk["prompt_token_ids"])
        out: list[EngineDelta] = []
        if usage := chunk.get("usage"):
            cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            out += [replace(d, num_cached_tokens=cached) for d in self.held]
            self.held = []
        for choice in chunk.get("choices") or []:
            delta = EngineDelta(
                text=str(choice.get("text") or ""),
                token_ids=list(choice.get("token_ids") or []),
                prompt_token_ids=self.prompt_ids,
                num_cached_tokens=0,
                finish_reason=choice.get("finish_reason"),
                index=int(choice.get("index", 0)),
                logprobs=logprobs_of(choice.get("logprobs")) if self.with_logprobs else None,
            )
            if delta.finish_reason == "error":
                raise InternalFailure(f"the engine of model '{self.pool}' failed on this request", code="engine_error")
            self.first = False
            if delta.finish_reason is None:
                out.append(delta)
            else:
                self.held.append(delta)
        return out

    @property
    def retryable(self) -> bool:
        """Whether a replica fault can still be retried elsewhere: nothing of the answer reached the client."""
        return self.first or self.restartable

    def finish(self) -> list[EngineDelta]:
        held, self.held = self.held, []
        return held
