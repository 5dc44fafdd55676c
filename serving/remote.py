"""A model pool served by remote vLLM replicas (`vllm serve --enable-scale-out`): the second implementation of
the engine interface, behind the same lease as the in-process engine.

Wire protocol: vLLM's token-in/token-out endpoint, `/inference/v1/generate`. Tessera sends what it already
made for the in-process engine:
- the prompt's token ids, rendered and tokenized by Tessera, with each media placeholder expanded to the
  medium's token count;
- its own encoder outputs as vLLM `MultiModalKwargsItem`s (`features`): image embeddings and audio
  log-mel features, straight from the embedding cache when they are cached, so a replica never decodes
  or re-encodes an image and repeated media are encoded once for the whole fleet. Each item is named by
  the embedding-cache key, which the replica's prefix and processor caches use as the medium's identity;
- sampling parameters, cache salt and priority as vLLM's own `SamplingParams` fields.

The replica streams text deltas with token ids, the expanded prompt's token ids (so per-modality usage is
counted from the engine's own placeholders, as in-process) and the prefix-cache hits. Closing the stream
aborts the request on the replica, and `abort` also asks it to.

The endpoint picker (`serving.fleet`) chooses the replica. A request whose first delta has not arrived is
retried on another replica when its replica fails; after the first delta it is never retried, and a
failure ends the stream with an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from serving.engine import (
    EngineCapacity,
    EngineDelta,
    EngineRequest,
    EngineStats,
    GenerationParams,
    TokenLogprob,
    invalid_request,
)
from serving.errors import EngineUnavailable, InternalFailure
from serving.fleet import EndpointPicker, Policy, Replica

logger = logging.getLogger(__name__)

GENERATE_PATH = "/inference/v1/generate"
ABORT_PATH = "/inference/v1/abort_requests"
# The replica names its engine request after ours.
REPLICA_REQUEST_PREFIX = "generate-tokens-"


@dataclass(frozen=True)
class RemoteSettings:
    urls: tuple[str, ...]
    policy: Policy = "picker"
    scrape_interval_s: float = 0.25
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 300.0  # longest silence on a stream, queueing included
    startup_wait_s: float = 600.0  # how long start-up waits for a first replica to answer


def _engine_gone(message: str) -> bool:
    """Whether a replica's error says its engine is gone, rather than that this request failed: only then is
    the replica ejected and the request tried elsewhere, so one bad request cannot eject a whole pool."""
    lowered = message.lower()
    return any(sign in lowered for sign in ("enginecore", "enginedead", "engine dead", "not running", "shutting down"))


class _ReplicaFailed(Exception):
    """The replica failed before anything of the answer reached the client: another replica may take it."""


def sampling_body(p: GenerationParams) -> dict[str, Any]:
    """vLLM `SamplingParams` fields as JSON, with the same meaning as `serving.vllm_io.sampling_params`."""
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
        if p.structured.json_schema is not None:
            body["structured_outputs"] = {"json": p.structured.json_schema}
        elif p.structured.json_object:
            body["structured_outputs"] = {"json_object": True}
    return body


def _media_hashes(kind: str, request: EngineRequest, items: Sequence[Any]) -> list[str]:
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
        hashes["image"] = _media_hashes("image", request, images)
    if audios:
        lengths = torch.tensor([a.frames for a in audios], dtype=torch.long)
        mask = torch.zeros(len(audios), int(lengths.max()), dtype=torch.long)
        for i, n in enumerate(lengths.tolist()):
            mask[i, :n] = 1
        tensors["input_audio_features"] = torch.cat([a.features for a in audios], dim=1)
        tensors["feature_attention_mask"] = mask
        tensors["audio_feature_lengths"] = lengths
        hashes["audio"] = _media_hashes("audio", request, audios)
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


def _logprobs(raw: Any) -> tuple[TokenLogprob, ...] | None:
    if not raw or not isinstance(raw, dict):
        return None
    out = []
    for entry in raw.get("content") or []:
        top = tuple((str(t["token"]), float(t["logprob"])) for t in entry.get("top_logprobs") or [])
        out.append(TokenLogprob(str(entry["token"]), float(entry["logprob"]), top))
    return tuple(out)


def _error_message(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except ValueError:
        return body.decode(errors="replace")[:500]
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)
    return str(error)


class RemoteEngine:
    """One pool on remote vLLM replicas, chosen per request by the pool's endpoint picker."""

    def __init__(
        self,
        name: str,
        model_path: str,
        picker: EndpointPicker,
        client: httpx.AsyncClient,
        *,
        hf_config: Any,
        tokenizer: Any,
        capacity: EngineCapacity,
        media_token_ids: dict[str, int],
    ) -> None:
        self.name = name
        self.model_path = model_path
        self.picker = picker
        self.capacity = capacity
        self._client = client
        self._hf_config = hf_config
        self._tokenizer = tokenizer
        self._media_token_ids = media_token_ids
        thinker = getattr(hf_config, "thinker_config", hf_config)
        self._merge_size = int(getattr(getattr(thinker, "vision_config", None), "spatial_merge_size", 2) or 2)
        self._where: dict[str, Replica] = {}  # request id -> the replica running it

    @classmethod
    async def connect(cls, name: str, checkpoint: Path, settings: RemoteSettings) -> RemoteEngine:
        """Load the checkpoint's config and tokenizer (no weights), reach the replicas and learn their
        capacity. Waits up to `startup_wait_s` for a first replica (they may still be loading weights)."""
        from transformers import AutoConfig, AutoTokenizer

        from serving.pools import media_token_ids

        hf_config = await asyncio.to_thread(AutoConfig.from_pretrained, checkpoint)
        tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, checkpoint)
        timeout = httpx.Timeout(connect=settings.connect_timeout_s, read=settings.read_timeout_s, write=30.0, pool=5.0)
        client = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=1024))
        picker = EndpointPicker(
            name, list(settings.urls), client, policy=settings.policy, scrape_interval_s=settings.scrape_interval_s
        )
        await picker.start()
        started = time.monotonic()
        next_note = 0.0
        blocks, max_len = picker.capacity_blocks(), await _max_model_len(client, picker)
        while blocks is None or max_len is None:
            waited = time.monotonic() - started
            if waited > settings.startup_wait_s:
                await picker.close()
                await client.aclose()
                raise EngineUnavailable(f"no replica of pool '{name}' answered at {', '.join(settings.urls)}")
            if waited >= next_note:
                logger.info("pool %s: waiting for a replica to answer (%.0f s so far)", name, waited)
                next_note = waited + 10
            await asyncio.sleep(1.0)
            await picker.scrape_once()
            blocks, max_len = picker.capacity_blocks(), await _max_model_len(client, picker)
        capacity = EngineCapacity(num_blocks=blocks[0], block_size=blocks[1], max_model_len=max_len)
        logger.info(
            "pool %s: %d remote replicas, %d KV blocks of %d tokens in all, max_model_len %d",
            name,
            len(settings.urls),
            capacity.num_blocks,
            capacity.block_size,
            capacity.max_model_len,
        )
        return cls(
            name,
            str(checkpoint),
            picker,
            client,
            hf_config=hf_config,
            tokenizer=tokenizer,
            capacity=capacity,
            media_token_ids=media_token_ids(hf_config),
        )

    async def close(self) -> None:
        await self.picker.close()
        await self._client.aclose()

    # The engine interface.

    def shutdown(self) -> None:
        """The replicas belong to the operator and keep running; `close` releases the gateway's side."""

    @property
    def stats(self) -> EngineStats:
        out = EngineStats()
        live = [r for r in self.picker.replicas if r.state == "up" and r.metrics is not None]
        for r in live:
            m = r.metrics
            assert m is not None
            out.running += m.running
            out.waiting += m.waiting
            out.prefix_cache_queries += int(m.prefix_cache_queries)
            out.prefix_cache_hits += int(m.prefix_cache_hits)
            out.kv_cache_usage += m.kv_cache_usage / len(live)
        return out

    def replicas(self) -> list[dict[str, Any]]:
        return self.picker.snapshot()

    def hf_config(self) -> Any:
        return self._hf_config

    def tokenizer(self) -> Any:
        return self._tokenizer

    def is_healthy(self) -> bool:
        return any(r.state == "up" for r in self.picker.replicas)

    def num_unfinished(self) -> int:
        return len(self._where)

    async def has_work(self, wait_s: float = 5.0) -> bool:
        return any(
            r.in_flight or (r.metrics and (r.metrics.running or r.metrics.waiting)) for r in self.picker.replicas
        )

    async def abort(self, request_id: str) -> None:
        replica = self._where.get(request_id)
        if replica is None:
            return
        try:
            await self._client.post(
                replica.url + ABORT_PATH, json={"request_ids": [REPLICA_REQUEST_PREFIX + request_id]}, timeout=2.0
            )
        except httpx.HTTPError as exc:  # closing the stream aborts it too
            logger.info("abort of %s on %s failed: %s", request_id, replica.name, exc)

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineDelta]:
        body = await asyncio.to_thread(self._body, request)
        tried: set[str] = set()
        while True:
            replica = self.picker.pick(request.affinity, exclude=tried)
            tried.add(replica.url)
            started = False
            try:
                with self.picker.lease(replica):
                    self._where[request.request_id] = replica
                    if request.restartable:  # whole or not at all: a fault mid-answer can still go elsewhere
                        answer = [delta async for delta in self._stream(replica, body, request)]
                    else:
                        answer = None
                        async for delta in self._stream(replica, body, request):
                            started = True
                            yield delta
                self.picker.report_success(replica)
                for delta in answer or ():
                    yield delta
                return
            except _ReplicaFailed as exc:
                self.picker.report_failure(replica, str(exc))
                if len(tried) >= len(self.picker.replicas):
                    raise EngineUnavailable(f"every replica of model '{self.name}' failed: {exc}") from exc
                logger.warning(
                    "request %s: replica %s failed (%s); retrying elsewhere", request.request_id, replica.name, exc
                )
            except httpx.HTTPError as exc:  # a streamed answer, after its first delta: never retried
                self.picker.report_failure(replica, type(exc).__name__)
                raise EngineUnavailable(
                    f"the replica {replica.name} of model '{self.name}' failed mid-stream: {type(exc).__name__}"
                ) from exc
            finally:
                self._where.pop(request.request_id, None)
            assert not started

    def _body(self, request: EngineRequest) -> dict[str, Any]:
        token_ids = request.prompt_token_ids
        if token_ids is None:
            token_ids = self._tokenizer.encode(request.prompt, add_special_tokens=False)
        expanded, features = features_body(list(token_ids), self._media_token_ids, self._merge_size, request)
        body: dict[str, Any] = {
            "request_id": request.request_id,
            "model": None,
            "token_ids": expanded,
            "sampling_params": sampling_body(request.params),
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            "output_mode": "text",
            "priority": request.priority,
        }
        if features is not None:
            body["features"] = features
        if request.cache_salt:
            body["cache_salt"] = request.cache_salt
        return body

    async def _stream(
        self, replica: Replica, body: dict[str, Any], request: EngineRequest
    ) -> AsyncIterator[EngineDelta]:
        """The replica's deltas. Replica faults before the first delta (or at any point of a restartable
        request) raise `_ReplicaFailed`."""
        state = _StreamState(self.name, request.params.logprobs is not None, request.restartable)
        try:
            async with self._client.stream("POST", replica.url + GENERATE_PATH, json=body) as resp:
                if resp.status_code >= 500:
                    message = f"HTTP {resp.status_code}: {_error_message(await resp.aread())}"
                    if resp.status_code in (502, 503, 504) or _engine_gone(message):
                        raise _ReplicaFailed(message)
                    raise InternalFailure(f"the engine of model '{self.name}' failed: {message}", code="engine_error")
                if resp.status_code >= 400:
                    raise invalid_request(_error_message(await resp.aread()), request.params)
                async for line in resp.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        break
                    for delta in state.feed(json.loads(line[6:])):
                        yield delta
            for delta in state.finish():
                yield delta
        except httpx.TransportError as exc:
            if state.retryable:
                raise _ReplicaFailed(f"{type(exc).__name__}: {exc}") from exc
            raise


class _StreamState:
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
            if self.retryable and _engine_gone(message):
                raise _ReplicaFailed(message)
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
                logprobs=_logprobs(choice.get("logprobs")) if self.with_logprobs else None,
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


async def _max_model_len(client: httpx.AsyncClient, picker: EndpointPicker) -> int | None:
    """The smallest context any live replica serves."""
    lengths = []
    for r in picker.replicas:
        if r.state != "up":
            continue
        try:
            resp = await client.get(r.url + "/v1/models", timeout=2.0)
            resp.raise_for_status()
            lengths += [int(m["max_model_len"]) for m in resp.json().get("data", []) if m.get("max_model_len")]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            logger.warning("replica %s: /v1/models failed: %s", r.name, exc)
    return min(lengths) if lengths else None
