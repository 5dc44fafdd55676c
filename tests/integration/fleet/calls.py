"""What the fleet tests ask of a gateway and its replicas: the replicas' state as /health lists them, a replica's
own metrics, and requests of each modality mix."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from bench.common import png_data_url, wav_b64
from bench.replicas import Replica
from serving.engines.replica_metrics import parse_vllm_metrics
from tests import openai_wire
from tests.conftest import ADMIN_KEY, API_KEY, LiveServer


def replica_state(server: LiveServer) -> dict[str, dict[str, Any]]:
    health = httpx.get(server.base_url + "/health", timeout=10).json()
    return {r["url"]: r for r in health["engines"]["small"]["replicas"]}


def picks(server: LiveServer) -> dict[str, int]:
    return {url: int(r["picks"]) for url, r in replica_state(server).items()}


def scrape(replica: Replica) -> Any:
    return parse_vllm_metrics(httpx.get(replica.url + "/metrics", timeout=5).text, time.monotonic())


def parts(kind: str, seed: int) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "What is in this request?"}]
    if "image" in kind:
        parts.append({"type": "image_url", "image_url": {"url": png_data_url(seed)}})
    if "audio" in kind:
        parts.append({"type": "input_audio", "input_audio": {"data": wav_b64(1.5, freq=300.0 + seed), "format": "wav"}})
    return parts


def describe_image(url: str, *, max_tokens: int, system: str | None = None, **extra: Any) -> dict[str, Any]:
    user = {
        "role": "user",
        "content": [{"type": "text", "text": "Describe."}, {"type": "image_url", "image_url": {"url": url}}],
    }
    messages = [{"role": "system", "content": system}, user] if system else [user]
    return {"model": "small", "messages": messages, "max_tokens": max_tokens, **extra}


def usage_fields(usage: Any) -> dict[str, int]:
    details = usage.prompt_tokens_details
    return {
        "prompt": usage.prompt_tokens,
        "completion": usage.completion_tokens,
        "image": details.image_tokens,
        "audio": details.audio_tokens,
        "text": details.text_tokens,
    }


def ask(base: str, kind: str, seed: int, stream: bool) -> tuple[str, dict[str, int]]:
    client = openai_wire.openai_client(base, API_KEY)
    body: dict[str, Any] = {
        "model": "small",
        "messages": [{"role": "user", "content": parts(kind, seed)}],
        "max_tokens": 12,
        "temperature": 0,
    }
    if not stream:
        resp = client.chat.completions.create(**body)
        return resp.choices[0].message.content or "", usage_fields(resp.usage)
    text, usage = [], None
    for chunk in client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True}):
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert usage is not None
    return "".join(text), usage_fields(usage)


def all_up(gateway: LiveServer, within_s: float = 30.0) -> list[dict[str, Any]]:
    """The replicas as /health lists them, once all are up (a replica the machine kept too busy to answer its
    scrapes is readmitted), or as they are after `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        listed: list[dict[str, Any]] = httpx.get(gateway.base_url + "/health", timeout=10).json()["engines"]["small"][
            "replicas"
        ]
        if all(r["state"] == "up" for r in listed) or time.monotonic() > deadline:
            return listed
        time.sleep(0.5)


def tenant_key(server: LiveServer, **quota: int) -> str:
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    tenant = httpx.post(
        server.base_url + "/admin/tenants",
        headers=admin,
        json={"name": f"fleet-{uuid.uuid4().hex[:6]}", **quota},
        timeout=30,
    ).json()
    return str(
        httpx.post(f"{server.base_url}/admin/tenants/{tenant['id']}/keys", headers=admin, json={}, timeout=30).json()[
            "key"
        ]
    )
