"""What goes over the wire to a remote vLLM replica and back (`serving.engines.remote` holds the engine that sends it).

Out: vLLM `SamplingParams` fields as JSON (`sampling_body`), and the prompt with each media placeholder expanded
plus Tessera's encoder outputs as vLLM `MultiModalKwargsItem`s in the family's field layout, each named by its
embedding-cache key (`features_body`); or, where the gateway does not encode a medium for the family, the raw media
as `content_parts` that the replica encodes and expands itself. Back: the replica's stream chunks turned into engine
deltas (`StreamState`), and its error bodies into messages, telling a replica whose engine is gone (tried elsewhere)
from a request that failed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from serving.encoders.families import AudioFeatures, FamilyAdapter
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
        tensor = item.features if isinstance(item, AudioFeatures) else item.embeds
        out.append(hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest())
    return out


def features_body(
    token_ids: list[int],
    media_token_ids: dict[str, int],
    request: EngineRequest,
    family: FamilyAdapter | None,
    hf_config: Any,
) -> tuple[list[int], dict[str, Any] | None]:
    """The prompt with each media placeholder expanded, and the encoder outputs as vLLM kwargs items in the
    family's own field layout. Blocking (tensor serialization): call it off the event loop."""
    images = request.image_embeds or []
    audios = request.audio_features or []
    if not images and not audios:
        return token_ids, None
    if family is None:
        raise InternalFailure("encoder outputs for a pool with no family adapter", code="no_family_adapter")
    from transformers import BatchFeature
    from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import encode_mm_kwargs_item
    from vllm.multimodal.inputs import MultiModalKwargsItems

    sizes = {"image": [e.tokens for e in images], "audio": [a.tokens for a in audios]}
    expanded, placeholders = _expand(token_ids, media_token_ids, sizes)
    tensors: dict[str, Any] = {}
    hashes: dict[str, list[str]] = {}
    if images:
        tensors |= family.image_inputs(images)
        hashes["image"] = media_hashes("image", request, images)
    if audios:
        tensors |= family.audio_inputs(audios)
        hashes["audio"] = media_hashes("audio", request, audios)
    # The model's own field layout (which tensors split per item, which stay on the CPU), as its processor
    # would have produced them.
    items = MultiModalKwargsItems.from_hf_inputs(BatchFeature(tensors), family.field_config(tensors, hf_config))
    data = {kind: [encode_mm_kwargs_item(it) for it in items[kind]] for kind in hashes}
    features = {
        "mm_hashes": hashes,
        "mm_placeholders": {k: placeholders[k] for k in hashes},
        "kwargs_data": data,
    }
    return expanded, features


def _expand(
    token_ids: list[int], media_token_ids: dict[str, int], sizes: dict[str, list[int]]
) -> tuple[list[int], dict[str, list[dict[str, int]]]]:
    """Each medium's one placeholder token repeated to its token count, and where each landed."""
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
    if seen["image"] != len(sizes["image"]) or seen["audio"] != len(sizes["audio"]):
        raise InternalFailure("the prompt's media placeholders do not match its media", code="placeholder_mismatch")
    return expanded, placeholders


def content_parts(request: EngineRequest) -> list[dict[str, Any]]:
    """Raw media for a replica that encodes them itself, as data URLs in placeholder order, each named by its
    embedding-cache key so that the replica's processor cache and the picker's media affinity agree. Blocking
    (encoding): call it off the event loop."""
    import base64
    import io

    parts: list[dict[str, Any]] = []
    keys = request.media_keys
    for i, image in enumerate(request.images):
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
        parts.append(_part("image_url", url, keys.get("image", []), i))
    for i, (samples, rate) in enumerate(request.audios):
        import soundfile

        buf = io.BytesIO()
        soundfile.write(buf, samples, rate, format="WAV", subtype="FLOAT")
        url = "data:audio/wav;base64," + base64.b64encode(buf.getvalue()).decode()
        parts.append(_part("audio_url", url, keys.get("audio", []), i))
    return parts


def _part(kind: str, url: str, keys: list[str], index: int) -> dict[str, Any]:
    part = {"type": kind, "url": url}
    if index < len(keys):
        part["uuid"] = keys[index]
    return part


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
