"""The family matrix (`make test-families`): every adapted family, in process and on a remote replica, each medium it
takes encoded by the gateway and by the engine side by side. A cell passes when both give the same greedy tokens and
prompt, the usage counts what vLLM's own processor places, and a repeated medium is an embedding-cache hit wherever
the gateway encodes it. Too slow for CI (a server and a replica per family): it runs when TESSERA_FAMILY_MATRIX=1,
and writes its cells to artifacts/families-matrix.json, which docs/families.md quotes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from bench.replicas import Replica
from demo.family_checkpoints import build_family_checkpoint
from serving.encoders.counting import MediaTokenCounter
from tests import media
from tests.conftest import API_KEY, MODELS_DIR, REPO, free_port, pools_env, run_server

pytestmark = pytest.mark.skipif(
    os.environ.get("TESSERA_FAMILY_MATRIX") != "1", reason="the family matrix runs with `make test-families`"
)

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_omni_moe", "qwen2_audio")
RESULTS = REPO / "artifacts" / "families-matrix.json"
ENGINE = {"kv_cache_gib": 0.125, "max_model_len": 2048, "max_num_seqs": 4}
IMAGE_SIZE = (640, 480)
CLIP_S = 2.5


def _ask(client: Any, model: str, part: dict[str, Any]) -> Any:
    return client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [{"type": "text", "text": "What is it?"}, part]}],
        max_tokens=6,
        temperature=0,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )


def _part(medium: str, seed: int) -> dict[str, Any]:
    if medium == "image":
        return {"type": "image_url", "image_url": {"url": media.png_data_url(seed, IMAGE_SIZE)}}
    return {
        "type": "input_audio",
        "input_audio": {"data": media.audio_b64(CLIP_S + seed / 100, 22050), "format": "wav"},
    }


def _cell(client: Any, medium: str, seed: int, expected: int) -> dict[str, Any]:
    """One medium through the gateway-encoded pool `g` twice and the engine-encoded pool `e` once."""
    part = _part(medium, seed)
    first, again, engine = _ask(client, "g", part), _ask(client, "g", part), _ask(client, "e", part)
    details = [r.usage.prompt_tokens_details for r in (first, again, engine)]
    counted = [getattr(d, f"{medium}_tokens") for d in details]
    cached = details[1].model_extra[f"cached_{medium}_tokens"]
    same = [r.choices[0].model_extra["token_ids"] for r in (first, again, engine)]
    prompts = [r.model_extra["prompt_token_ids"] for r in (first, engine)]
    return {
        "same_answer": same[0] == same[1] == same[2] and prompts[0] == prompts[1],
        "counted": counted[0],
        "processor": expected,
        "counted_exactly": counted == [expected] * 3,
        "cache_hit_tokens": cached,
    }


def _cells(client: Any, pool_info: dict[str, Any], counter: MediaTokenCounter) -> dict[str, Any]:
    encoding = pool_info["encoding"]
    out = {}
    for seed, medium in enumerate(encoding):
        size = IMAGE_SIZE if medium == "image" else (round((CLIP_S + seed / 100) * 16000),)
        expected = counter.count_now(medium, size)
        out[medium] = {"encoded_in": encoding[medium], **_cell(client, medium, seed, expected)}
    return out


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, Any]]:
    found: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    yield found
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")


def _record(results: dict[str, Any], family: str, where: str, cells: dict[str, Any]) -> None:
    results.setdefault(family, {})[where] = cells
    for medium, cell in cells.items():
        assert cell["same_answer"], (family, where, medium, cell)
        assert cell["counted_exactly"], (family, where, medium, cell)
        if cell["encoded_in"] != "engine":
            assert cell["cache_hit_tokens"] == cell["counted"], (family, where, medium, cell)


def _models(server: Any) -> dict[str, Any]:
    import httpx

    resp = httpx.get(server.v1 + "/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    return {m["id"]: m for m in resp.json()["data"]}


@pytest.mark.parametrize("family", FAMILIES)
def test_in_process(family, tmp_path, results):
    from tests.openai_wire import openai_client

    path = build_family_checkpoint(family, MODELS_DIR / "families" / family)
    pools = [
        {"name": "g", "model": str(path), **ENGINE},
        {"name": "e", "model": str(path), "encoder_pools": False, **ENGINE},
    ]
    running = run_server(pools_env(tmp_path, pools), tmp_path / "server.log")
    server = next(running)
    try:
        cells = _cells(
            openai_client(server.v1, API_KEY, timeout=120), _models(server)["g"], MediaTokenCounter.for_checkpoint(path)
        )
    finally:
        running.close()
    _record(results, family, "in process", cells)


@pytest.mark.parametrize("family", FAMILIES)
def test_remote(family, tmp_path, results):
    from tests.openai_wire import openai_client

    path = build_family_checkpoint(family, MODELS_DIR / "families" / family)
    replica = Replica(path, family, free_port(), tmp_path / "replica.log", kv_cache_bytes=256 << 20)
    replica.start()
    try:
        replica.wait_ready()
        pools = [
            {"name": "g", "model": str(path), "replicas": [replica.url]},
            {"name": "e", "model": str(path), "replicas": [replica.url], "encoder_pools": False},
        ]
        running = run_server(pools_env(tmp_path, pools), tmp_path / "server.log")
        server = next(running)
        try:
            client = openai_client(server.v1, API_KEY, timeout=120)
            cells = _cells(client, _models(server)["g"], MediaTokenCounter.for_checkpoint(path))
        finally:
            running.close()
    finally:
        replica.stop()
    _record(results, family, "remote", cells)
