"""The live-server launcher of the benches: `tessera serve` on a free port, with a demo tenant sized for a bench."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import BenchFailure, Progress
from demo.checkpoints import SERVE_STAGED_ENV

KEY = "sk-bench"
ADMIN_KEY = "sk-bench-admin"
DEMO_TENANT = "bench"
# A bench measures the server, not its tenant's limits: bursts and back-to-back runs must never meet a 429.
BENCH_TOKENS_PER_MINUTE = 1_000_000_000
BENCH_CONCURRENT_REQUESTS = 10_000
STARTUP_TIMEOUT_S = 420


@dataclass
class LiveServer:
    base: str
    key: str
    admin_key: str
    startup_s: float
    log_path: Path

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.admin_key}"}

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"


PORT_ATTEMPTS = 3  # starts of a bench server whose port was taken meanwhile


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def widen_limits(
    base: str, admin_headers: dict[str, str], tenant: str = DEMO_TENANT, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Give `tenant` limits no bench reaches (and the `extra` quota fields), through the admin API, and check
    they were stored."""
    wanted = {"tokens_per_minute": BENCH_TOKENS_PER_MINUTE, "concurrent_requests": BENCH_CONCURRENT_REQUESTS}
    wanted |= extra or {}
    with httpx.Client(base_url=base, headers=admin_headers, timeout=30) as http:
        listed = http.get("/admin/tenants")
        if listed.status_code != 200:
            raise BenchFailure(f"GET /admin/tenants answered {listed.status_code}: {listed.text[:300]}")
        found = [t for t in listed.json()["data"] if t["name"] == tenant]
        if not found:
            raise BenchFailure(f"the bench server has no tenant '{tenant}'")
        put = http.put(f"/admin/tenants/{found[0]['id']}/quota", json=wanted)
        if put.status_code != 200:
            raise BenchFailure(f"PUT quota of tenant '{tenant}' answered {put.status_code}: {put.text[:300]}")
        stored = next(t for t in http.get("/admin/tenants").json()["data"] if t["id"] == found[0]["id"])
    quota = stored.get("quota") or {}
    if any(quota.get(k) != v for k, v in wanted.items()):
        raise BenchFailure(f"tenant '{tenant}' quota did not take: {quota}")
    return quota


def _server_env(port: int, data: str, models_dir: Path, pools: list[dict[str, Any]], extra: dict[str, str]) -> dict:
    # Inherited TESSERA_* settings would make runs incomparable; a bench states all of its own. The one kept says
    # which committed weights the demo pools are built with: the caller built them so, and a server started without
    # it would rebuild them with the served weights before it answered.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_") or k == SERVE_STAGED_ENV}
    env.update(
        {
            "TESSERA_API_KEY": KEY,
            "TESSERA_ADMIN_KEY": ADMIN_KEY,
            "TESSERA_DEMO_TENANT": DEMO_TENANT,
            "TESSERA_PORT": str(port),
            "TESSERA_DATA_DIR": data,
            "TESSERA_MODELS_DIR": str(models_dir.resolve()),
            "TESSERA_POOLS": json.dumps(pools),
            "TESSERA_LOG_LEVEL": "WARNING",
            # The admission step's burst queues for KV on purpose; on a slower machine than ours the default
            # 30 s wait would turn that queueing into 503s and end the bench.
            "TESSERA_ADMISSION_MAX_WAIT_S": "300",
            **extra,
        }
    )
    return env


def _wait_healthy(proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchFailure(
                f"bench server exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
            )
        try:
            if httpx.get(base + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise BenchFailure(
        f"bench server not healthy after {STARTUP_TIMEOUT_S} s:\n{log.read_text(errors='replace')[-3000:]}"
    )


@contextmanager
def live_server(
    models_dir: Path,
    pools: dict[str, Any] | list[dict[str, Any]],
    progress: Progress,
    env: dict[str, str] | None = None,
    quota: dict[str, Any] | None = None,
) -> Iterator[LiveServer]:
    """A server of its own (temporary data dir, free port) serving `pools`; its demo tenant's limits are widened
    before it is handed over, and it is stopped on exit."""
    pool_list = pools if isinstance(pools, list) else [pools]
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as data:
        started = time.perf_counter()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            # The port is free when chosen, but the engines start (and bind ports of their own) before the server
            # listens; a server that lost its port to them starts again on another, in a fresh data dir.
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            run_dir = Path(data) / f"run{attempt}"
            run_dir.mkdir()
            log = run_dir / "server.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "tessera", "serve"],
                    env=_server_env(port, str(run_dir), models_dir, pool_list, env or {}),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            try:
                _wait_healthy(proc, base, log)
                break
            except BenchFailure:
                stop_process(proc)
                if attempt == PORT_ATTEMPTS or "address already in use" not in log.read_text(errors="replace"):
                    raise
                progress(f"  port {port} was taken while the engines started; starting again on another")
        try:
            server = LiveServer(base, KEY, ADMIN_KEY, time.perf_counter() - started, log)
            stored = widen_limits(base, server.admin_headers, extra=quota)
            for p in pool_list:
                shown = ", ".join(f"{k}={v}" for k, v in p.items() if k not in ("name", "model"))
                progress(f"  server up: pool {p['name']} ({shown or 'defaults'})")
            progress(
                f"  in {server.startup_s:.0f}s; tenant '{DEMO_TENANT}': {stored['tokens_per_minute']} tokens/min, "
                f"{stored['concurrent_requests']} concurrent"
            )
            try:
                yield server
            except Exception as exc:
                exc.add_note(f"bench server log (tail):\n{server.log_tail()}")
                raise
        finally:
            stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Ask a server to stop (it drains its usage writes), and kill it if it has not within a minute."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
