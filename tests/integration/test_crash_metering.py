"""kill -9 a gateway on PostgreSQL under streaming traffic, then start another: every request whose client saw
`[DONE]` has its complete usage row and outbox rows, the requests cut off are settled as interrupted by the
next gateway, and nothing is billed twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func
from sqlmodel import Session, select

from db.models import BillingOutbox, InferenceRequest
from tests.conftest import MODELS_DIR, REPO, free_port
from tests.dbs import migrated

KEY = "sk-crash-test"
ARTIFACTS = REPO / "artifacts"


@pytest.fixture
def pg(tmp_path) -> Iterator:
    yield from migrated("postgresql", tmp_path)


def _env(db_url: str, data: Path, port: int) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")},
        "TESSERA_PORT": str(port),
        "TESSERA_DATA_DIR": str(data),
        "TESSERA_MODELS_DIR": str(MODELS_DIR),
        "TESSERA_DATABASE_URL": db_url,
        "TESSERA_API_KEY": KEY,
        "TESSERA_KEY_SECRET": "crash-test-secret",
        "TESSERA_GROUNDING": "false",
        "TESSERA_JOURNAL_HEARTBEAT_S": "0.5",
        "TESSERA_JOURNAL_STALE_S": "3",
        "TESSERA_POOLS": json.dumps([{"name": "small", "kv_cache_gib": 0.25}]),
    }


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tessera", "serve"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{env['TESSERA_PORT']}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"gateway not healthy:\n{log.read_text(errors='replace')[-3000:]}")


def _stream(base: str, results: list[dict], stop: threading.Event) -> None:
    body = {
        "model": "small",
        "messages": [{"role": "user", "content": "Tell me about the harbour."}],
        "max_tokens": 24,
        "stream": True,
    }
    deadline = time.monotonic() + 60
    while not stop.is_set() and time.monotonic() < deadline:
        seen: dict = {"id": None, "done": False}
        try:
            with httpx.stream(
                "POST", base + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}, timeout=30
            ) as resp:
                for line in resp.iter_lines():
                    if line == "data: [DONE]":
                        seen["done"] = True
                    elif line.startswith("data: {") and seen["id"] is None:
                        seen["id"] = json.loads(line[6:]).get("id")
        except httpx.HTTPError:
            pass
        if seen["id"]:
            results.append(seen)


def test_kill_9_under_traffic_loses_no_usage_and_bills_nothing_twice(pg, tmp_path):
    url = pg.url.render_as_string(hide_password=False)
    port = free_port()
    first = _start(_env(url, tmp_path / "a", port), tmp_path / "a.log")
    base = f"http://127.0.0.1:{port}"
    results: list[dict] = []
    stop = threading.Event()
    workers = [threading.Thread(target=_stream, args=(base, results, stop)) for _ in range(4)]
    for w in workers:
        w.start()
    time.sleep(6.0)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    killed_at = time.monotonic()
    stop.set()
    for w in workers:
        w.join(timeout=60)

    second = _start(_env(url, tmp_path / "b", free_port()), tmp_path / "b.log")
    try:
        done = [r["id"] for r in results if r["done"]]
        cut = [r["id"] for r in results if not r["done"]]
        assert len(done) >= 4, f"too little traffic before the kill: {results}"
        with Session(pg) as s:
            rows = {r.request_id: r for r in s.exec(select(InferenceRequest))}
            outbox = list(s.exec(select(BillingOutbox)))
            distinct = s.exec(select(func.count(func.distinct(BillingOutbox.identifier)))).one()
        for rid in done:
            row = rows[rid]
            assert row.status == "completed", (rid, row.status)
            assert row.output_tokens > 0
            dims = {o.dimension for o in outbox if o.request_id == rid}
            assert {"text_input", "output"} <= dims, (rid, dims)
        assert not [r for r in rows.values() if r.status == "running"], "rows left running after restart"
        assert distinct == len(outbox)  # no event twice
        statuses: dict[str, int] = {}
        for r in rows.values():
            statuses[r.status] = statuses.get(r.status, 0) + 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "crash-metering.json").write_text(
            json.dumps(
                {
                    "requests_client_saw_done": len(done),
                    "requests_cut_off": len(cut),
                    "rows_by_status": statuses,
                    "outbox_rows": len(outbox),
                    "restart_s": round(time.monotonic() - killed_at, 1),
                },
                indent=2,
            )
            + "\n"
        )
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(timeout=60)
