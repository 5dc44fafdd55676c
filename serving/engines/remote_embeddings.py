"""An embedding pool served by remote vLLM replicas (`vllm serve --runner pooling`): the embedding engine interface
over HTTP, with the chat fleet's endpoint picker choosing the replica.

Tessera tokenizes each input itself (usage and per-input limits are counted before any replica sees it) and sends
the token ids to the replica's OpenAI `/v1/embeddings`, one input per call, so that each input can go to the least
loaded replica and the engine batches what arrives together. A replica that refuses the connection, times out or
answers 5xx is ejected, and the input goes to another replica; a 4xx is the client's, and is passed on as its error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import httpx

from serving.engines.base import EngineCapacity
from serving.engines.fleet import EndpointPicker, Replica
from serving.engines.remote import RemoteSettings
from serving.engines.remote_wire import error_message
from serving.errors import EngineUnavailable, InvalidRequest

logger = logging.getLogger(__name__)

EMBEDDINGS_PATH = "/v1/embeddings"


class RemoteEmbeddingEngine:
    def __init__(
        self,
        name: str,
        model_path: str,
        served_name: str,
        picker: EndpointPicker,
        client: httpx.AsyncClient,
        *,
        hf_config: Any,
        tokenizer: Any,
        max_model_len: int,
    ) -> None:
        self.name = name
        self.model_path = model_path
        self.picker = picker
        self.capacity = EngineCapacity(num_blocks=0, block_size=1, max_model_len=max_model_len)
        self._served_name = served_name
        self._client = client
        self._hf_config = hf_config
        self._tokenizer = tokenizer

    @classmethod
    async def connect(cls, name: str, checkpoint: Path, settings: RemoteSettings) -> RemoteEmbeddingEngine:
        """Load the checkpoint's config and tokenizer and wait (up to `startup_wait_s`) until a replica names its
        model and context length."""
        from transformers import AutoConfig, AutoTokenizer

        hf_config = await asyncio.to_thread(AutoConfig.from_pretrained, checkpoint)
        tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, checkpoint)
        timeout = httpx.Timeout(connect=settings.connect_timeout_s, read=settings.read_timeout_s, write=30.0, pool=5.0)
        client = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=256))
        picker = EndpointPicker(
            name, list(settings.urls), client, policy=settings.policy, scrape_interval_s=settings.scrape_interval_s
        )
        await picker.start()
        started = time.monotonic()
        while (served := await _served_model(client, picker)) is None:
            if time.monotonic() - started > settings.startup_wait_s:
                await picker.close()
                await client.aclose()
                raise EngineUnavailable(f"no replica of pool '{name}' answered at {', '.join(settings.urls)}")
            await asyncio.sleep(1.0)
            await picker.scrape_once()
        logger.info("pool %s: %d remote embedding replicas serving %s", name, len(settings.urls), served[0])
        return cls(
            name,
            str(checkpoint),
            served[0],
            picker,
            client,
            hf_config=hf_config,
            tokenizer=tokenizer,
            max_model_len=served[1],
        )

    async def close(self) -> None:
        await self.picker.close()
        await self._client.aclose()

    def shutdown(self) -> None:
        """The replicas belong to the operator and keep running; `close` releases the gateway's side."""

    def replicas(self) -> list[dict[str, Any]]:
        return self.picker.snapshot()

    def hf_config(self) -> Any:
        return self._hf_config

    def tokenizer(self) -> Any:
        return self._tokenizer

    def is_healthy(self) -> bool:
        return any(r.state == "up" for r in self.picker.replicas)

    async def embed(self, request_id: str, token_ids: list[int], dimensions: int | None = None) -> list[float]:
        body: dict[str, Any] = {"model": self._served_name, "input": [token_ids], "encoding_format": "float"}
        if dimensions is not None:
            body["dimensions"] = dimensions
        tried: list[str] = []
        while True:
            try:
                replica = self.picker.pick(None, exclude=tried)
            except EngineUnavailable:
                raise EngineUnavailable(
                    f"no replica of model '{self.name}' could embed the input (tried {', '.join(tried) or 'none'})",
                    retry_after_s=1.0,
                ) from None
            tried.append(replica.url)
            replica.picks += 1
            with self.picker.lease(replica):
                try:
                    resp = await self._client.post(replica.url + EMBEDDINGS_PATH, json=body)
                except httpx.HTTPError as exc:
                    self._failed(replica, f"{type(exc).__name__}: {exc}")
                    continue
            if resp.status_code >= 500:
                self._failed(replica, f"HTTP {resp.status_code}: {error_message(resp.content)}")
                continue
            if resp.status_code >= 400:
                message = error_message(resp.content)
                raise InvalidRequest(message, param="dimensions" if "dimensions" in message else "input")
            self.picker.report_success(replica)
            return [float(x) for x in resp.json()["data"][0]["embedding"]]

    def _failed(self, replica: Replica, reason: str) -> None:
        logger.warning("pool %s: embedding on %s failed: %s", self.name, replica.name, reason)
        self.picker.report_failure(replica, reason)


async def _served_model(client: httpx.AsyncClient, picker: EndpointPicker) -> tuple[str, int] | None:
    """The model id and context length the first live replica serves."""
    for replica in picker.replicas:
        if replica.state != "up":
            continue
        try:
            resp = await client.get(replica.url + "/v1/models", timeout=2.0)
            resp.raise_for_status()
            for model in resp.json().get("data", []):
                return str(model["id"]), int(model.get("max_model_len") or 512)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            logger.info("replica %s: /v1/models not ready: %s", replica.name, exc)
    return None
