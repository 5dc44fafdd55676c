"""A bounded soak: open-loop traffic at about 80% of measured capacity against a gateway in front of two vLLM
replicas, with a replica's engine core killed (kill -9; its API server then stops answering, and the replica is
restarted) and Redis restarted mid-run.

Passes when no answer is a 5xx other than a declared 503 (with `retry-after`), every request whose client saw
`[DONE]` is metered exactly once, no usage row is left running, and the gateway's memory grows by under 5%
after warm-up. CI runs it for `TESSERA_SOAK_S` = 60 s (the default); the full soak is opt-in:
`TESSERA_SOAK_S=600 .venv/bin/python -m pytest tests/integration/test_soak.py`. Figures go to
`artifacts/soak.json`.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from bench.replicas import running_replicas
from tests.conftest import MODELS_DIR, REPO, free_port, run_server

SOAK_S = float(os.environ.get("TESSERA_SOAK_S", "60"))
KEY = "sk-soak-test"
LOAD = 0.8  # of measured capacity
RSS_GROWTH_LIMIT = 0.05


class RedisServer:
    """A Redis of the test's own, so restarting it disturbs nothing else on the machine."""

    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if (
                subprocess.run(
                    ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, check=False
                ).stdout.strip()
                == b"PONG"
            ):
                return
            time.sleep(0.1)
        pytest.fail("the soak's Redis did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(free_port(), tmp_path / "redis.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _one(base: str, rng_seed: int) -> dict[str, Any]:
    """One streamed request; what the client saw."""
    rng = random.Random(rng_seed)
    body = {
        "model": "small",
        "messages": [
            {"role": "system", "content": f"Support desk {rng_seed % 3}: answer in one line."},
            {"role": "user", "content": f"Question {rng.randint(0, 10_000)}: where is my order?"},
        ],
        "max_tokens": 16,
        "stream": True,
    }
    seen: dict[str, Any] = {"status": None, "id": None, "done": False, "error_event": None, "retry_after": None}
    try:
        with httpx.stream(
            "POST", base + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=120
        ) as resp:
            seen["status"] = resp.status_code
            seen["retry_after"] = resp.headers.get("retry-after")
            if resp.status_code != 200:
                resp.read()
                return seen
            for line in resp.iter_lines():
                if line == "data: [DONE]":
                    seen["done"] = True
                elif line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        seen["error_event"] = chunk["error"].get("code") or chunk["error"].get("type")
                    elif seen["id"] is None:
                        seen["id"] = chunk.get("id")
    except httpx.HTTPError as exc:
        seen["status"] = f"transport: {type(exc).__name__}"
    return seen


def _capacity(base: str) -> float:
    """Requests per second the two replicas sustain: two sequential requests' service time, both replicas."""
    times = []
    for i in range(4):
        started = time.monotonic()
        assert _one(base, 10_000 + i)["done"]
        times.append(time.monotonic() - started)
    return 2 / (sum(times[1:]) / len(times[1:]))


def test_soak(redis_server: RedisServer, tmp_path: Path) -> None:
    with running_replicas(MODELS_DIR / "small", "small", 2, tmp_path) as replicas:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")},
            "TESSERA_PORT": str(free_port()),
            "TESSERA_DATA_DIR": str(tmp_path / "data"),
            "TESSERA_MODELS_DIR": str(MODELS_DIR),
            "TESSERA_API_KEY": KEY,
            "TESSERA_REDIS_URL": f"redis://127.0.0.1:{redis_server.port}/0",
            "TESSERA_GROUNDING": "false",
            "TESSERA_LOG_LEVEL": "WARNING",
            "TESSERA_POOLS": json.dumps([{"name": "small", "replicas": [r.url for r in replicas]}]),
        }
        (tmp_path / "data").mkdir()
        for gateway in run_server(env, tmp_path / "gateway.log"):  # stopped (usage settled) when the loop ends
            figures = _soak(gateway.base_url, gateway.proc.pid, replicas, redis_server)
    figures["rows"] = _metered(tmp_path / "data" / "tessera.db", figures.pop("results"))
    (REPO / "artifacts").mkdir(exist_ok=True)
    (REPO / "artifacts" / "soak.json").write_text(json.dumps(figures, indent=2) + "\n")
    _check(figures)


def _soak(base: str, pid: int, replicas: Any, redis_server: RedisServer) -> dict[str, Any]:
    rate = LOAD * _capacity(base)
    rng = random.Random(2026)
    arrivals, t = [], 0.0
    while t < SOAK_S:
        t += rng.expovariate(rate)
        arrivals.append(t)
    process = psutil.Process(pid)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    events: dict[str, float] = {}
    rss: dict[str, int] = {}

    def inject() -> None:
        time.sleep(SOAK_S * 0.15)
        rss["after_warm_up"] = process.memory_info().rss
        time.sleep(SOAK_S * 0.2)
        # An engine crash: its engine-core process is killed, and its API server stops answering /health.
        events["engine_core_killed"] = replicas[0].kill_engine_core()
        events["engine_core_killed_s"] = time.monotonic() - began
        replicas[0].kill()  # what is left of it (a supervisor's restart)
        replicas[0].start()  # it loads again while traffic goes on; readmitted when its /health answers
        time.sleep(SOAK_S * 0.3)
        redis_server.stop()
        events["redis_stopped_s"] = time.monotonic() - began
        time.sleep(2.0)
        redis_server.start()
        events["redis_back_s"] = time.monotonic() - began

    def send(seed: int) -> None:
        outcome = _one(base, seed)
        with lock:
            results.append(outcome)

    began = time.monotonic()
    injector = threading.Thread(target=inject)
    injector.start()
    with ThreadPoolExecutor(64) as pool:
        for i, at in enumerate(arrivals):
            delay = began + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(send, i)
    injector.join(timeout=120)
    rss["end"] = process.memory_info().rss
    return {
        "duration_s": SOAK_S,
        "rate_per_s": round(rate, 2),
        "requests": len(results),
        "by_status": dict(Counter(str(r["status"]) for r in results)),
        "stream_error_events": dict(Counter(r["error_event"] for r in results if r["error_event"])),
        "503_without_retry_after": sum(1 for r in results if r["status"] == 503 and not r["retry_after"]),
        "events": {k: round(v, 1) for k, v in events.items()},
        "rss_after_warm_up_mib": round(rss["after_warm_up"] / 2**20, 1),
        "rss_end_mib": round(rss["end"] / 2**20, 1),
        "results": results,
    }


def _metered(db: Path, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Usage rows of the requests whose client saw [DONE], read once the gateway stopped (it settles on exit)."""
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT request_id, status FROM inference_requests").fetchall())
        running = conn.execute("SELECT count(*) FROM inference_requests WHERE status = 'running'").fetchone()[0]
        outbox = conn.execute("SELECT count(*), count(DISTINCT identifier) FROM billing_outbox").fetchone()
    done = [r["id"] for r in results if r["done"] and not r["error_event"]]
    return {
        "client_saw_done": len(done),
        "done_with_completed_row": sum(1 for rid in done if rows.get(rid) == "completed"),
        "rows_by_status": dict(Counter(rows.values())),
        "rows_running": running,
        "outbox_rows": outbox[0],
        "outbox_distinct": outbox[1],
    }


def _check(figures: dict[str, Any]) -> None:
    statuses = figures["by_status"]
    assert figures["requests"] >= 20, figures
    assert figures["events"]["engine_core_killed"] == 1, "no engine-core process was found to kill"
    undeclared = {s: n for s, n in statuses.items() if s not in ("200", "503", "429")}
    assert not undeclared, f"answers other than 200, 429 and declared 503s: {undeclared}"
    assert figures["503_without_retry_after"] == 0, figures
    rows = figures["rows"]
    assert rows["done_with_completed_row"] == rows["client_saw_done"], rows
    assert rows["rows_running"] == 0, rows
    assert rows["outbox_rows"] == rows["outbox_distinct"], rows
    growth = figures["rss_end_mib"] / figures["rss_after_warm_up_mib"] - 1
    assert growth < RSS_GROWTH_LIMIT, f"gateway RSS grew {growth:.1%} after warm-up"
