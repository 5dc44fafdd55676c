"""A model pool served by remote vLLM replicas (`vllm serve --enable-scale-out`): the second implementation of
the engine interface, behind the same lease as the in-process engine.

Wire protocol (built and read in `serving.engines.remote_wire`): vLLM's token-in/token-out endpoint,
`/inference/v1/generate`. Tessera sends what it already made for the in-process engine:
- the prompt's token ids, rendered and tokenized by Tessera, with each media placeholder expanded to the
  medium's token count;
- where the gateway encodes for the pool's family (serving.encoders.families), its own encoder outputs as vLLM
  `MultiModalKwargsItem`s (`features`) in that family's field layout, straight from the embedding cache when they
  are cached, so a replica never decodes or re-encodes an image and repeated media are encoded once for the whole
  fleet. Each item is named by the embedding-cache key, which the replica's prefix and processor caches use as the
  medium's identity;
- otherwise the raw media as `content_parts` (data URLs, named the same way), which the replica decodes, encodes
  and expands itself; the picker's media affinity then sends a repeated medium to the replica that holds it;
- sampling parameters, cache salt and priority as vLLM's own `SamplingParams` fields.

The replica streams text deltas with token ids, the expanded prompt's token ids (so per-modality usage is
counted from the engine's own placeholders, as in-process) and the prefix-cache hits. Closing the stream
aborts the request on the replica, and `abort` also asks it to.

The endpoint picker (`serving.engines.fleet`) chooses the replica. A request whose first delta has not arrived is
retried on another replica when its replica fails; after the first delta it is never retried, and a
failure ends the stream with an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from serving.encoders.families import architecture_of, family_for
from serving.engines.base import (
    EngineCapacity,
    EngineDelta,
    EngineRequest,
    EngineStats,
    invalid_request,
)
from serving.engines.fleet import EndpointPicker, Policy, Replica
from serving.engines.remote_wire import (
    ReplicaFailed,
    StreamState,
    content_parts,
    engine_gone,
    error_message,
    features_body,
    sampling_body,
)
from serving.errors import EngineUnavailable, InternalFailure

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
    # vLLM encoder-only instances (ec_producer) sharing an encoder-cache store with the replicas (ec_consumer).
    encoder_urls: tuple[str, ...] = ()


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
        encoders: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.model_path = model_path
        self.picker = picker
        self.capacity = capacity
        self._client = client
        self._hf_config = hf_config
        self._tokenizer = tokenizer
        self._media_token_ids = media_token_ids
        self.architecture = architecture_of(hf_config)
        self.family = family_for(self.architecture)  # how encoder outputs reach the replicas; None: they encode all
        self._where: dict[str, Replica] = {}  # request id -> the replica running it
        self._encoders = encoders  # vLLM encoder-only instances in front of the replicas
        self.encoder_stats = {"encoded": 0, "failed": 0}

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
            encoders=settings.encoder_urls,
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
        if self._encoders and body.get("content_parts"):
            await self._encode_first(body, request)
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
            except ReplicaFailed as exc:
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

    async def _encode_first(self, body: dict[str, Any], request: EngineRequest) -> None:
        """Has an encoder-only instance encode the request's raw media into the shared encoder-cache store, where
        the replica that decodes it finds them by the same identity. A repeated medium goes to the same instance.
        Failing that, the replica encodes them itself: the request goes on, only slower."""
        key = request.affinity or request.request_id
        url = self._encoders[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(self._encoders)]
        prefill = {
            **body,
            "request_id": f"{request.request_id}-encode",
            "sampling_params": {**body["sampling_params"], "max_tokens": 1, "n": 1},
            "stream": False,
        }
        prefill.pop("stream_options", None)
        try:
            resp = await self._client.post(url + GENERATE_PATH, json=prefill, headers=request.trace_headers)
            if resp.status_code >= 400:
                raise httpx.HTTPStatusError(error_message(resp.content), request=resp.request, response=resp)
            self.encoder_stats["encoded"] += 1
        except httpx.HTTPError as exc:
            self.encoder_stats["failed"] += 1
            logger.warning(
                "request %s: encoder instance %s failed (%s); the replica encodes", request.request_id, url, exc
            )

    def _body(self, request: EngineRequest) -> dict[str, Any]:
        token_ids = request.prompt_token_ids
        if token_ids is None:
            token_ids = self._tokenizer.encode(request.prompt, add_special_tokens=False)
        if (request.images or request.audios) and (request.image_embeds or request.audio_features):
            raise InternalFailure("a replica takes raw media or encoder outputs, not both", code="remote_mixed_media")
        expanded, features = features_body(
            list(token_ids), self._media_token_ids, request, self.family, self._hf_config
        )
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
        elif request.images or request.audios:
            body["content_parts"] = content_parts(request)
        if request.cache_salt:
            body["cache_salt"] = request.cache_salt
        return body

    async def _stream(
        self, replica: Replica, body: dict[str, Any], request: EngineRequest
    ) -> AsyncIterator[EngineDelta]:
        """The replica's deltas. Replica faults before the first delta (or at any point of a restartable
        request) raise `ReplicaFailed`."""
        state = StreamState(self.name, request.params.logprobs is not None, request.restartable)
        try:
            post = self._client.stream("POST", replica.url + GENERATE_PATH, json=body, headers=request.trace_headers)
            async with post as resp:
                if resp.status_code >= 500:
                    message = f"HTTP {resp.status_code}: {error_message(await resp.aread())}"
                    if resp.status_code in (502, 503, 504) or engine_gone(message):
                        raise ReplicaFailed(message)
                    raise InternalFailure(f"the engine of model '{self.name}' failed: {message}", code="engine_error")
                if resp.status_code >= 400:
                    raise invalid_request(error_message(await resp.aread()), request.params)
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
                raise ReplicaFailed(f"{type(exc).__name__}: {exc}") from exc
            raise


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
