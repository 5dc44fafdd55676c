"""Shared fixtures: one live server (real vLLM engines) per test session, started on first use."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bench.server import stop_process
from serving.prompt_router import save_router
from tests.stubs import slice_router

REPO = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / ".tessera" / "models"
API_KEY = "sk-test-key"
ADMIN_KEY = "sk-test-admin"
REDIS_URL = "redis://127.0.0.1:6379/3"
MAX_BODY_BYTES = 8 * 1024 * 1024
STARTUP_TIMEOUT_S = 420


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveServer:
    base_url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def v1(self) -> str:
        return self.base_url + "/v1"

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _wait_healthy(server: LiveServer) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"server exited with {server.proc.returncode} during start-up:\n{server.log_tail()}")
        try:
            if httpx.get(server.base_url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"server not healthy after {STARTUP_TIMEOUT_S}s:\n{server.log_tail()}")


STRIPE_WEBHOOK_SECRET = "whsec_tessera_test"
MAX_TRANSCRIPTION_SECONDS = 90  # the shared server's limit on an audio file to transcribe


STARTED: list[LiveServer] = []  # every server of the session, for the summary of engines that died
ENGINE_DEATH = ("died unexpectedly", "EngineDeadError", "engine core died", "Killed")


def pools_env(data: Path, pools: list[dict], **extra: str) -> dict[str, str]:
    """The environment of a server of its own: these pools only, no grounding, the test key, a free port and
    `data` as its data dir; none of the caller's TESSERA_ settings."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")},
        "TESSERA_API_KEY": API_KEY,
        "TESSERA_PORT": str(free_port()),
        "TESSERA_DATA_DIR": str(data),
        "TESSERA_GROUNDING": "false",
        "TESSERA_POOLS": json.dumps(pools),
        **extra,
    }


def run_server(env: dict[str, str], log_path: Path) -> Iterator[LiveServer]:
    """Start `tessera serve` with `env`, wait until healthy, yield it, and stop it afterwards."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tessera", "serve"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    live = LiveServer(f"http://127.0.0.1:{env['TESSERA_PORT']}", proc, log_path)
    STARTED.append(live)
    try:
        _wait_healthy(live)
        yield live
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def fake_stripe():
    from tests.fake_stripe import FakeStripe

    with FakeStripe() as fake:
        yield fake


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, fake_stripe) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("tessera-data")
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()  # a database of its own, emptied for each session
    port = free_port()
    router = data / "router.json"
    save_router(slice_router(text=0.95, image=0.05), router)  # the `router` policy's file (test_routing_policy)
    pools = [
        {"name": "small", "aliases": ["8b"]},
        # The large pool is limited to text and image here, so the suite covers a pool lacking a modality.
        {"name": "large", "aliases": ["70b"], "modalities": ["text", "image"], "tool_parser": "hermes"},
        # The demo embedding and transcription pools, as the embedded default serves them.
        {"name": "minilm", "kind": "embedding", "aliases": ["embed"], "kv_cache_gib": 0.0625},
        {"name": "whisper", "kind": "transcription", "aliases": ["whisper-1"], "kv_cache_gib": 0.25},
    ]
    env = {
        **os.environ,
        "TESSERA_API_KEY": API_KEY,
        "TESSERA_ADMIN_KEY": ADMIN_KEY,
        "TESSERA_REDIS_URL": REDIS_URL,
        "TESSERA_RATE_WINDOW_S": "5",
        "TESSERA_STRIPE_API_KEY": "sk_test_tessera",
        "TESSERA_STRIPE_API_BASE": fake_stripe.url,
        "TESSERA_STRIPE_WEBHOOK_SECRET": STRIPE_WEBHOOK_SECRET,
        "TESSERA_PORT": str(port),
        "TESSERA_DATA_DIR": str(data),
        "TESSERA_MODELS_DIR": str(MODELS_DIR),
        "TESSERA_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "TESSERA_FETCH_ALLOW_HOSTS": json.dumps(["localhost"]),
        "TESSERA_POOLS": json.dumps(pools),
        "TESSERA_MAX_TRANSCRIPTION_SECONDS": str(MAX_TRANSCRIPTION_SECONDS),
        "TESSERA_ROUTER_PATH": str(router),
        # The judge's questions queue behind whatever else the suite has on `large`: a verdict must not depend on
        # that pool being idle (test_judge).
        "TESSERA_GROUNDING_VERDICT_WAIT_S": "120",
    }
    yield from run_server(env, data / "server.log")


# A session server that only a few tests use is stopped after the last of them (they run first, see below), so
# its memory is free again before the fleet's replicas start: the machine cannot hold them all at once.
EARLY_RELEASED = ("large_server", "families_server")
EARLY_RELEASE: dict[str, Iterator[LiveServer]] = {}


@pytest.fixture(scope="session")
def large_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server of the large pool alone with every modality (the shared server's large pool takes no audio): its
    Whisper audio tower, as trained and served, against transformers, and the playground hearing a clip."""
    data = tmp_path_factory.mktemp("tessera-large")
    env = {
        **os.environ,
        "TESSERA_API_KEY": API_KEY,
        "TESSERA_ADMIN_KEY": ADMIN_KEY,
        "TESSERA_PORT": str(free_port()),
        "TESSERA_DATA_DIR": str(data),
        "TESSERA_MODELS_DIR": str(MODELS_DIR),
        "TESSERA_POOLS": json.dumps([{"name": "large", "aliases": ["70b"]}]),
    }
    running = run_server(env, data / "server.log")
    EARLY_RELEASE["large_server"] = running
    yield next(running)
    running.close()


@pytest.fixture(scope="session")
def client(server: LiveServer):
    from tests.openai_wire import openai_client

    return openai_client(server.v1, API_KEY, timeout=120)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Fails a test whose chat-completion responses broke OpenAI's schemas (tests/openai_wire.py checks them as they
    arrive, including those its fixtures received while setting up). A test that fails anyway keeps its own
    failure, with the violations in a report section beside it."""
    from tests.openai_wire import VIOLATIONS

    title = "responses that do not match OpenAI's published schemas"
    try:
        result = yield
    except BaseException:
        if found := VIOLATIONS.drain():
            item.add_report_section("call", title, "\n".join(found))
        raise
    if found := VIOLATIONS.drain():
        pytest.fail(f"{title}:\n" + "\n".join(found), pytrace=False)
    return result


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of an early-released server run first, in their own order, and tests that kill an engine run last,
    after everything that needs the engines alive."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("destructive") is not None,
            not any(name in getattr(item, "fixturenames", ()) for name in EARLY_RELEASED),
        )
    )


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stops an early-released server once the test after this one no longer uses it."""
    for name, running in list(EARLY_RELEASE.items()):
        still_used = nextitem is not None and name in getattr(nextitem, "fixturenames", ())
        if name in getattr(item, "fixturenames", ()) and not still_used:
            running.close()
            del EARLY_RELEASE[name]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Names any engine that died inside a test server, with the lines around it: a dead engine fails every later
    test of its pool, and the server's log is gone with the session's temporary folder. Only after failures: the
    destructive tests kill engines on purpose."""
    if not terminalreporter.stats.get("failed"):
        return
    for live in STARTED:
        lines = live.log_path.read_text(errors="replace").splitlines() if live.log_path.exists() else []
        hits = [i for i, line in enumerate(lines) if any(sign in line for sign in ENGINE_DEATH)]
        if hits:
            terminalreporter.write_sep("=", f"an engine died in the server at {live.base_url}")
            terminalreporter.write_line("\n".join(lines[max(0, hits[0] - 30) : hits[0] + 10]))
