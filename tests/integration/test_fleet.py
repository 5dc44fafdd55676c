"""A pool on remote vLLM replicas: two real `vllm serve` processes of the small demo checkpoint, and two gateways
on PostgreSQL and Redis in front of them.

What the embedded engine does, a remote pool does too (the same greedy output and the same per-modality usage),
and the fleet adds its own promises: cancelled requests free the replica, repeated media follow their replica,
a hot medium spills within the load bound, a dead replica is ejected and readmitted, requests that have not
started are retried elsewhere, and two gateways share quotas and the embedding cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.common import png_data_url, wav_b64
from bench.replicas import Replica, running_replicas
from serving.replica_metrics import parse_vllm_metrics
from tests import openai_wire
from tests.conftest import ADMIN_KEY, API_KEY, MODELS_DIR, LiveServer, free_port, run_server
from tests.dbs import migrated

REDIS_URL = "redis://127.0.0.1:6379/5"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
KEY_SECRET = "fleet-test-secret"


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sequence[Replica]]:
    """Two replicas of their own; TESSERA_TEST_REPLICAS="URL,URL" reuses running ones while developing (the
    failover test then skips: it must kill and restart its replica)."""
    logs = tmp_path_factory.mktemp("replicas")
    if reuse := os.environ.get("TESSERA_TEST_REPLICAS"):
        ports = [int(u.rsplit(":", 1)[1]) for u in reuse.split(",")]
        yield [Replica(MODELS_DIR / "small", "small", port, logs / f"{port}.log") for port in ports]
        return
    with running_replicas(MODELS_DIR / "small", "small", 2, logs) as started:
        yield started


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    engine_iter = migrated("postgresql", tmp_path_factory.mktemp("fleet-db"))
    engine = next(engine_iter)
    yield engine.url.render_as_string(hide_password=False)
    with pytest.raises(StopIteration):
        next(engine_iter)


def _gateway_env(replicas: Sequence[Replica], db_url: str, data: Path, shared: Path) -> dict[str, str]:
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")},
        "TESSERA_PORT": str(free_port()),
        "TESSERA_DATA_DIR": str(data),
        "TESSERA_MODELS_DIR": str(MODELS_DIR),
        "TESSERA_DATABASE_URL": db_url,
        "TESSERA_REDIS_URL": REDIS_URL,
        "TESSERA_KEY_SECRET": KEY_SECRET,
        "TESSERA_API_KEY": API_KEY,
        "TESSERA_ADMIN_KEY": ADMIN_KEY,
        "TESSERA_EMBEDDING_CACHE_DIR": str(shared),
        "TESSERA_GROUNDING": "false",
        "TESSERA_POOLS": json.dumps([{"name": "small", "aliases": ["8b"], "replicas": [r.url for r in replicas]}]),
    }


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fleet-embeddings")


@pytest.fixture(scope="module")
def gateway(replicas, fleet_db, shared_dir, tmp_path_factory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("gateway-a")
    yield from run_server(_gateway_env(replicas, fleet_db, data, shared_dir), data / "server.log")


@pytest.fixture(scope="module")
def gateway_b(gateway, replicas, fleet_db, shared_dir, tmp_path_factory) -> Iterator[LiveServer]:
    """A second gateway: the same database, Redis, key secret and embedding store; started after the first, so
    the migrations and the demo tenant exist."""
    data = tmp_path_factory.mktemp("gateway-b")
    env = {**_gateway_env(replicas, fleet_db, data, shared_dir), "TESSERA_API_KEY": API_KEY}
    yield from run_server(env, data / "server.log")


def _replica_state(server: LiveServer) -> dict[str, dict[str, Any]]:
    health = httpx.get(server.base_url + "/health", timeout=10).json()
    return {r["url"]: r for r in health["engines"]["small"]["replicas"]}


def _picks(server: LiveServer) -> dict[str, int]:
    return {url: int(r["picks"]) for url, r in _replica_state(server).items()}


def _scrape(replica: Replica) -> Any:
    return parse_vllm_metrics(httpx.get(replica.url + "/metrics", timeout=5).text, time.monotonic())


def _parts(kind: str, seed: int) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "What is in this request?"}]
    if "image" in kind:
        parts.append({"type": "image_url", "image_url": {"url": png_data_url(seed)}})
    if "audio" in kind:
        parts.append({"type": "input_audio", "input_audio": {"data": wav_b64(1.5, freq=300.0 + seed), "format": "wav"}})
    return parts


def _describe_image(url: str, *, max_tokens: int, system: str | None = None, **extra: Any) -> dict[str, Any]:
    user = {
        "role": "user",
        "content": [{"type": "text", "text": "Describe."}, {"type": "image_url", "image_url": {"url": url}}],
    }
    messages = [{"role": "system", "content": system}, user] if system else [user]
    return {"model": "small", "messages": messages, "max_tokens": max_tokens, **extra}


def _usage_fields(usage: Any) -> dict[str, int]:
    details = usage.prompt_tokens_details
    return {
        "prompt": usage.prompt_tokens,
        "completion": usage.completion_tokens,
        "image": details.image_tokens,
        "audio": details.audio_tokens,
        "text": details.text_tokens,
    }


def _ask(base: str, kind: str, seed: int, stream: bool) -> tuple[str, dict[str, int]]:
    client = openai_wire.openai_client(base, API_KEY)
    body: dict[str, Any] = {
        "model": "small",
        "messages": [{"role": "user", "content": _parts(kind, seed)}],
        "max_tokens": 12,
        "temperature": 0,
    }
    if not stream:
        resp = client.chat.completions.create(**body)
        return resp.choices[0].message.content or "", _usage_fields(resp.usage)
    text, usage = [], None
    for chunk in client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True}):
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert usage is not None
    return "".join(text), _usage_fields(usage)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("kind", ["text", "image", "audio", "image+audio"])
def test_remote_answers_as_the_embedded_engine(server, gateway, kind, stream):
    """The session server runs the same checkpoint in-process: greedy text and every usage count agree."""
    embedded = _ask(server.v1, kind, 11, stream)
    remote = _ask(gateway.v1, kind, 11, stream)
    assert remote[1] == embedded[1]
    assert remote[0] == embedded[0]
    if "image" in kind:
        assert remote[1]["image"] > 0
    if "audio" in kind:
        assert remote[1]["audio"] > 0


def _all_up(gateway: LiveServer, within_s: float = 30.0) -> list[dict[str, Any]]:
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


def test_health_and_metrics_show_each_replica(gateway, replicas):
    listed = _all_up(gateway)
    assert sorted(r["url"] for r in listed) == sorted(r.url for r in replicas)
    assert all(r["state"] == "up" for r in listed), listed
    metrics = httpx.get(gateway.base_url + "/metrics", timeout=10).text
    for r in replicas:
        name = r.url.removeprefix("http://")
        assert f'tessera_replica_up{{model="small",replica="{name}"}} 1.0' in metrics


def test_cancelled_stream_frees_the_replica(gateway, replicas):
    body = {
        "model": "small",
        "messages": [{"role": "user", "content": "Write a very long story."}],
        "max_tokens": 2000,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"authorization": f"Bearer {API_KEY}"}
    with httpx.stream("POST", gateway.v1 + "/chat/completions", json=body, headers=headers, timeout=60) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        for _ in range(6):
            next(lines)
        # The replica's gauges are as of its last published step: on a busy machine the first scrape can
        # precede it, so wait (bounded) for the running request to show.
        deadline = time.monotonic() + 10
        while sum(_scrape(r).running for r in replicas) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sum(_scrape(r).running for r in replicas) == 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        scraped = [_scrape(r) for r in replicas]
        if sum(m.running for m in scraped) == 0 and all(m.kv_cache_usage == 0 for m in scraped):
            break
        time.sleep(0.2)
    scraped = [_scrape(r) for r in replicas]
    assert sum(m.running + m.waiting for m in scraped) == 0
    assert all(m.kv_cache_usage == 0 for m in scraped)


def test_repeated_media_follow_their_replica(gateway):
    """Each image's repeats land where it was first served (the replica holding its prefix)."""
    images = [png_data_url(100 + i) for i in range(8)]
    first: dict[int, str] = {}
    same = repeats = 0
    for rnd in range(4):
        for i, url in enumerate(images):
            before = _picks(gateway)
            resp = openai_wire.post(
                gateway.v1 + "/chat/completions",
                headers={"authorization": f"Bearer {API_KEY}"},
                json=_describe_image(url, max_tokens=2),
                timeout=60,
            )
            assert resp.status_code == 200, resp.text
            after = _picks(gateway)
            chosen = [u for u in after if after[u] > before[u]]
            assert len(chosen) == 1
            if rnd == 0:
                first[i] = chosen[0]
            else:
                repeats += 1
                same += chosen[0] == first[i]
    assert same / repeats >= 0.9, f"{same} of {repeats} repeats on their first replica"
    assert len(set(first.values())) == 2, "eight images should not all hash to one replica"


def test_a_hot_medium_spills_within_the_load_bound(gateway):
    """Eight concurrent requests for one image: its replica takes its bounded share, the other the rest."""
    url = png_data_url(999)
    body = _describe_image(url, max_tokens=24, ignore_eos=True)
    headers = {"authorization": f"Bearer {API_KEY}"}
    before = _picks(gateway)
    with ThreadPoolExecutor(8) as pool:
        codes = list(
            pool.map(
                lambda _: (
                    openai_wire.post(
                        gateway.v1 + "/chat/completions", json=body, headers=headers, timeout=120
                    ).status_code
                ),
                range(8),
            )
        )
    assert codes == [200] * 8
    after = _picks(gateway)
    spread = sorted(after[u] - before[u] for u in after)
    assert sum(spread) == 8
    assert spread[0] >= 1, f"the hot image never spilled: {spread}"
    assert spread[1] >= 4, f"affinity lost: {spread}"


def _tenant_key(server: LiveServer, **quota: int) -> str:
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


def test_cache_salt_keeps_tenants_apart_on_a_replica(gateway):
    """The same image and prompt from two tenants lands on one replica (media affinity), and only its own
    tenant's repeat reads the replica's prefix cache."""
    body = _describe_image(
        png_data_url(31337),
        max_tokens=2,
        system="You describe pictures for a museum catalogue, in one short line. " * 8,
    )

    def cached(key: str) -> tuple[int, dict[str, int]]:
        before = _picks(gateway)
        resp = openai_wire.post(
            gateway.v1 + "/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}, timeout=60
        )
        assert resp.status_code == 200, resp.text
        after = _picks(gateway)
        return resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"], {u: after[u] - before[u] for u in after}

    first, on_first = cached(API_KEY)
    again, on_again = cached(API_KEY)
    other, on_other = cached(_tenant_key(gateway))
    assert on_first == on_again == on_other
    assert first == 0
    assert again >= 128  # at least one full KV block of this tenant's prefix
    assert other == 0


def test_two_gateways_share_the_embedding_cache(gateway, gateway_b):
    url = png_data_url(4242)
    body = _describe_image(url, max_tokens=2)
    headers = {"authorization": f"Bearer {API_KEY}"}
    a = openai_wire.post(gateway.v1 + "/chat/completions", json=body, headers=headers, timeout=60).json()["usage"]
    b = openai_wire.post(gateway_b.v1 + "/chat/completions", json=body, headers=headers, timeout=60).json()["usage"]
    assert a["prompt_tokens_details"]["cached_image_tokens"] == 0
    assert b["prompt_tokens_details"]["image_tokens"] > 0
    assert b["prompt_tokens_details"]["cached_image_tokens"] == b["prompt_tokens_details"]["image_tokens"]


def test_two_gateways_share_the_concurrency_limit(gateway, gateway_b):
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    tenant = httpx.post(
        gateway.base_url + "/admin/tenants",
        headers=admin,
        json={"name": f"fleet-{uuid.uuid4().hex[:6]}", "concurrent_requests": 1},
        timeout=30,
    ).json()
    key = httpx.post(
        f"{gateway.base_url}/admin/tenants/{tenant['id']}/keys", headers=admin, json={}, timeout=30
    ).json()["key"]
    headers = {"authorization": f"Bearer {key}"}
    long_body = {
        "model": "small",
        "messages": [{"role": "user", "content": "Tell a story."}],
        # Long enough that it cannot finish before the probe below arrives: 400 tokens of the tiny small demo fit
        # in the socket buffers and were done (slot freed) before gateway B was asked, once, on a busy machine.
        "max_tokens": 3000,
        "ignore_eos": True,
        "stream": True,
    }
    short = {"model": "small", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    with httpx.stream("POST", gateway.v1 + "/chat/completions", json=long_body, headers=headers, timeout=120) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()  # held: a dropped iterator closes the response, which cancels the request
        next(lines)
        refused = openai_wire.post(gateway_b.v1 + "/chat/completions", json=short, headers=headers, timeout=60)
        assert refused.status_code == 429, refused.text
    deadline = time.monotonic() + 20
    status = 0
    while time.monotonic() < deadline and status != 200:
        status = openai_wire.post(
            gateway_b.v1 + "/chat/completions", json=short, headers=headers, timeout=60
        ).status_code
        time.sleep(0.3)
    assert status == 200


def test_a_request_is_retried_on_another_replica_before_its_first_delta(replicas):
    """A replica that refuses connections while still marked up: the request goes to the live one."""
    from serving.engine import EngineRequest, GenerationParams
    from serving.remote import RemoteEngine, RemoteSettings

    dead = f"http://127.0.0.1:{free_port()}"

    async def run() -> tuple[list[str], int, int]:
        engine = await RemoteEngine.connect(
            "small", MODELS_DIR / "small", RemoteSettings(urls=(replicas[0].url, dead), scrape_interval_s=5.0)
        )
        try:
            for r in engine.picker.replicas:  # as if the dead one had answered its last scrape
                r.state = "up"
            texts = []
            for i in range(3):
                request = EngineRequest(
                    request_id=f"retry-{i}-{uuid.uuid4().hex[:6]}",
                    prompt="<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
                    images=[],
                    audios=[],
                    params=GenerationParams(max_tokens=3, temperature=0.0),
                )
                texts.append("".join([d.text async for d in engine.generate(request)]))
            by_url = {r.url: r for r in engine.picker.replicas}
            return texts, by_url[dead].picks, by_url[replicas[0].url].picks
        finally:
            await engine.close()

    texts, dead_picks, live_picks = asyncio.run(run())
    assert all(texts)
    assert dead_picks >= 1
    assert live_picks == 3


# The first delta of an answer, as a replica streams it.
_FIRST_DELTA = {
    "choices": [{"index": 0, "text": "Par", "token_ids": [1], "finish_reason": None}],
    "prompt_token_ids": [1],
}


class _DiesMidAnswer:
    """A replica that starts an answer (one delta) and then drops the connection, as a replica killed mid-answer
    does. Every request it gets is counted."""

    def __init__(self) -> None:
        import socket

        self.requests = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        deadline = time.monotonic() + 300
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                head = b""
                while b"\r\n\r\n" not in head and len(head) < 1 << 20:
                    got = conn.recv(65536)
                    if not got:
                        break
                    head += got
                if b"/inference/v1/generate" not in head.split(b"\r\n", 1)[0]:
                    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    continue
                self.requests += 1
                event = f"data: {json.dumps(_FIRST_DELTA)}\n\n".encode()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                    + f"{len(event):x}\r\n".encode()
                    + event
                    + b"\r\n"
                )
                time.sleep(0.05)  # then gone, without the closing chunk

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.mark.parametrize("restartable", [True, False], ids=["whole-answer", "streamed"])
def test_a_replica_dying_mid_answer(replicas, restartable):
    """A replica fails after its first delta. An answer the client gets whole (not streamed) has shown nothing
    yet, so it is restarted on another replica and succeeds; a streamed one has already shown its first delta,
    so it fails rather than splice two answers."""
    from serving.engine import EngineRequest, EngineUnavailable, GenerationParams
    from serving.remote import RemoteEngine, RemoteSettings

    dying = _DiesMidAnswer()

    async def run() -> tuple[list[str], list[str]]:
        engine = await RemoteEngine.connect(
            "small",
            MODELS_DIR / "small",
            RemoteSettings(urls=(replicas[0].url, dying.url), policy="round_robin", scrape_interval_s=30.0),
        )
        answers: list[str] = []
        failures: list[str] = []
        try:
            for i in range(4):
                for r in engine.picker.replicas:  # as if the dying one had answered its last scrape
                    r.state = "up"
                request = EngineRequest(
                    request_id=f"mid-{i}-{uuid.uuid4().hex[:6]}",
                    prompt="<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
                    images=[],
                    audios=[],
                    params=GenerationParams(max_tokens=3, temperature=0.0),
                    restartable=restartable,
                )
                try:
                    answers.append("".join([d.text async for d in engine.generate(request)]))
                except EngineUnavailable as exc:
                    failures.append(str(exc))
            return answers, failures
        finally:
            await engine.close()

    try:
        answers, failures = asyncio.run(run())
    finally:
        dying.close()
    assert dying.requests >= 1, "round robin never sent a request to the dying replica"
    if restartable:
        assert failures == []
        assert len(answers) == 4
        assert all(a and not a.startswith("Par") for a in answers), answers  # nothing of the failed attempt
    else:
        assert len(failures) == dying.requests, (failures, dying.requests)
        assert all("mid-stream" in f for f in failures)


def test_a_killed_replica_is_ejected_and_readmitted(gateway, replicas):
    """kill -9 one replica under traffic: streams on it end with an error event, new requests all succeed on the
    other, it is ejected within 2 s, and readmitted once it is back."""
    headers = {"authorization": f"Bearer {API_KEY}"}
    victim, survivor = replicas[0], replicas[1]
    if victim.proc is None:
        pytest.skip("the replicas were reused (TESSERA_TEST_REPLICAS), so this test cannot kill one")
    assert all(r["state"] == "up" for r in _all_up(gateway))
    stop = threading.Event()
    outcomes: list[int] = []

    def steady() -> None:
        client = openai_wire.openai_client(gateway.v1, API_KEY)
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                client.chat.completions.create(
                    model="small", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
                )
                outcomes.append(200)
            except Exception as exc:  # counted, then asserted below
                outcomes.append(getattr(exc, "status_code", -1))

    def long_stream(out: dict[str, Any]) -> None:
        body = {
            "model": "small",
            "messages": [{"role": "user", "content": "Tell a long story."}],
            "max_tokens": 3000,  # cannot finish before the kill, even where the small demo runs fast
            "ignore_eos": True,
            "stream": True,
        }
        events: list[str] = []
        started = time.monotonic()
        with openai_wire.stream("POST", gateway.v1 + "/chat/completions", json=body, headers=headers, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    out.setdefault("first", time.monotonic())
        out["events"] = events
        out["seconds"] = time.monotonic() - started

    streams: list[dict[str, Any]] = [{} for _ in range(4)]
    workers = [threading.Thread(target=long_stream, args=(s,)) for s in streams]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all("first" in s for s in streams):
        time.sleep(0.1)
    on_victim = _replica_state(gateway)[victim.url]["in_flight"]
    assert on_victim >= 1, "no stream landed on the replica to be killed"
    traffic = [threading.Thread(target=steady) for _ in range(2)]
    for t in traffic:
        t.start()
    time.sleep(1.0)

    victim.kill()
    killed = time.monotonic()
    ejected_after = None
    while time.monotonic() - killed < 10:
        asked = time.monotonic()
        state = _replica_state(gateway)[victim.url]
        if state["state"] == "ejected":
            # When the gateway ejected it, by its own count: how long it had been ejected when it looked, taken
            # from when the question left. The gateway looked after that, so this errs early by the question's
            # way there; counting from the answer's arrival instead would err late by the way back, which a test
            # process starved of CPU by two busy replicas on two cores has been seen to take 7 s over.
            ejected_after = asked - state["ejected_for_s"] - killed
            break
        time.sleep(0.05)
    assert ejected_after is not None, "not ejected within 10 s"
    assert ejected_after <= 2.0, f"ejected after {ejected_after:.2f} s"

    time.sleep(3.0)  # traffic goes on against the survivor alone
    stop.set()
    for w in [*workers, *traffic]:
        w.join(timeout=90)
    assert not any(w.is_alive() for w in workers), "a stream hung after its replica died"

    errors = [s for s in streams if any('"error"' in e for e in s["events"])]
    finished = [s for s in streams if s not in errors]
    assert len(errors) == on_victim, f"{len(errors)} streams ended in an error, {on_victim} were on the killed replica"
    for s in errors:
        assert s["events"][-1] == "[DONE]"
        error = json.loads(next(e for e in s["events"] if '"error"' in e))["error"]
        assert error["type"]
        assert error["message"]
    for s in finished:
        assert s["events"][-1] == "[DONE]"
    # Requests that had not started streaming never see the dead replica.
    assert outcomes
    assert all(code == 200 for code in outcomes), [c for c in outcomes if c != 200]

    victim.start()
    victim.wait_ready()
    ready = time.monotonic()
    deadline = ready + 30
    while time.monotonic() < deadline and _replica_state(gateway)[victim.url]["state"] != "up":
        time.sleep(0.2)
    assert _replica_state(gateway)[victim.url]["state"] == "up"
    figures = {
        "ejected_after_kill_s": round(ejected_after, 3),
        "readmitted_after_ready_s": round(time.monotonic() - ready, 3),
        "streams_on_killed_replica": on_victim,
        "streams_ended_with_error_event": len(errors),
        "requests_during_failover": len(outcomes),
        "requests_failed": sum(code != 200 for code in outcomes),
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "fleet-failover.json").write_text(json.dumps(figures, indent=2) + "\n")
    resp = openai_wire.post(
        gateway.v1 + "/chat/completions",
        json={"model": "small", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        headers=headers,
        timeout=60,
    )
    assert resp.status_code == 200
    assert survivor.proc is not None
