"""When replicas fail: a request that has not started is retried on another replica, an answer the client gets
whole is restarted when its replica dies mid-answer (a streamed one fails rather than splice two answers), and a
replica killed under traffic is ejected within 2 s and readmitted once it is back. The kill runs last of the
package's tests (this module's name sorts last), since it restarts a replica the others share."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests import openai_wire
from tests.conftest import API_KEY, MODELS_DIR, free_port
from tests.integration.fleet.calls import all_up, replica_state

ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts"


def _hello(name: str, *, restartable: bool = False) -> Any:
    """A three-token greeting for the small demo, straight to an engine (no gateway)."""
    from serving.engines.base import EngineRequest, GenerationParams

    return EngineRequest(
        request_id=f"{name}-{uuid.uuid4().hex[:6]}",
        prompt="<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
        images=[],
        audios=[],
        params=GenerationParams(max_tokens=3, temperature=0.0),
        restartable=restartable,
    )


def test_a_request_is_retried_on_another_replica_before_its_first_delta(replicas):
    """A replica that refuses connections while still marked up: the request goes to the live one."""
    from serving.engines.remote import RemoteEngine, RemoteSettings

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
                request = _hello(f"retry-{i}")
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
    from serving.engines.remote import RemoteEngine, RemoteSettings
    from serving.errors import EngineUnavailable

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
                request = _hello(f"mid-{i}", restartable=restartable)
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
    assert all(r["state"] == "up" for r in all_up(gateway))
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
                    if stop.is_set() and '"error"' not in line:
                        # A token that arrives once the test is over proves the stream is alive on the survivor;
                        # 3,000 of them can take minutes on two busy cores, so it is closed here, not waited out.
                        # A stream left on the dead replica never gets here: it gets its error event or hangs.
                        out["alive_at_stop"] = True
                        break
        out["events"] = events
        out["seconds"] = time.monotonic() - started

    streams: list[dict[str, Any]] = [{} for _ in range(4)]
    workers = [threading.Thread(target=long_stream, args=(s,)) for s in streams]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all("first" in s for s in streams):
        time.sleep(0.1)
    on_victim = replica_state(gateway)[victim.url]["in_flight"]
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
        state = replica_state(gateway)[victim.url]
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
        assert s.get("alive_at_stop") or s["events"][-1] == "[DONE]"
    # Requests that had not started streaming never see the dead replica.
    assert outcomes
    assert all(code == 200 for code in outcomes), [c for c in outcomes if c != 200]

    victim.start()
    victim.wait_ready()
    ready = time.monotonic()
    deadline = ready + 30
    while time.monotonic() < deadline and replica_state(gateway)[victim.url]["state"] != "up":
        time.sleep(0.2)
    assert replica_state(gateway)[victim.url]["state"] == "up"
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
