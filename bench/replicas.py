"""Local `vllm serve` replicas of a demo checkpoint, for the fleet tests and `tessera bench fleet`.

Each replica is started with the flags a remote pool needs (docs/fleet.md, "Running one locally"), on
127.0.0.1, in float32 with one compute thread, and can be killed and restarted on the same port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import BenchFailure
from bench.server import free_port

STARTUP_TIMEOUT_S = 420

# What vLLM needs here: no usage reports, offline hub, one thread, 1 GiB of KV cache per replica.
REPLICA_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
}


def pooling_replica_command(checkpoint: Path, name: str, port: int) -> list[str]:
    """`vllm serve --runner pooling` as a remote embedding pool's replica: its OpenAI `/v1/embeddings` takes the token
    ids Tessera sends."""
    vllm = Path(sys.executable).with_name("vllm")
    return [
        str(vllm),
        "serve",
        str(checkpoint),
        "--runner",
        "pooling",
        "--served-model-name",
        name,
        "--dtype",
        "float32",
        "--enforce-eager",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def speech_replica_command(checkpoint: Path, name: str, port: int) -> list[str]:
    """`vllm serve` of a Whisper checkpoint as a remote transcription pool's replica, started as the in-process
    transcription engine is (`serving.engines.specs`): float32, the checkpoint's own context (448), one audio clip a
    prompt, priority scheduling, 32 sequences. Its token-in/token-out endpoint (`--enable-scale-out`) takes the
    decoder prompt Tessera builds; vLLM serves it for Whisper because Tessera's vLLM plugin, installed in this
    environment, declares Whisper a text generator (`serving.engines.vllm_patches`)."""
    vllm = Path(sys.executable).with_name("vllm")
    return [
        str(vllm),
        "serve",
        str(checkpoint),
        "--served-model-name",
        name,
        "--dtype",
        "float32",
        "--enforce-eager",
        "--enable-scale-out",
        "--enable-prompt-tokens-details",
        "--scheduling-policy",
        "priority",
        "--max-num-seqs",
        "32",
        "--limit-mm-per-prompt",
        json.dumps({"audio": 1}),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def replica_command(checkpoint: Path, name: str, port: int, *, max_model_len: int = 4096) -> list[str]:
    """`vllm serve` as a remote pool's replica: the token-in/token-out endpoint (`--enable-scale-out`), cached
    prompt tokens in usage, priority scheduling and prefix caching. The processor cache is off: Tessera sends
    every medium's encoder output with each request, and the replica's prefix cache keys on its identity."""
    vllm = Path(sys.executable).with_name("vllm")
    return [
        str(vllm),
        "serve",
        str(checkpoint),
        "--served-model-name",
        name,
        "--dtype",
        "float32",
        "--max-model-len",
        str(max_model_len),
        "--enforce-eager",
        "--enable-scale-out",
        "--enable-prompt-tokens-details",
        "--scheduling-policy",
        "priority",
        "--enable-prefix-caching",
        "--mm-processor-cache-gb",
        "0",
        "--limit-mm-per-prompt",
        json.dumps({"image": 8, "audio": 1, "video": 0}),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


@dataclass
class Replica:
    checkpoint: Path
    name: str
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    runner: str = "generate"  # or `pooling`: an embedding pool's replica; `transcription`: a Whisper pool's
    otlp_endpoint: str | None = None  # where the replica sends its `llm_request` spans (`--otlp-traces-endpoint`)
    kv_cache_bytes: int | None = None  # its KV cache (`--kv-cache-memory-bytes`) instead of REPLICA_ENV's 1 GiB
    extra_args: tuple[str, ...] = ()  # more `vllm serve` flags (an encoder tier's `--ec-transfer-config`, say)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self) -> tuple[list[str], dict[str, str]]:
        """The command line and environment `start` runs the replica with."""
        env = {**os.environ, **REPLICA_ENV}
        build = {"pooling": pooling_replica_command, "transcription": speech_replica_command}.get(
            self.runner, replica_command
        )
        command = build(self.checkpoint, self.name, self.port)
        if self.runner == "transcription":
            # The engine core runs the model itself (vLLM's uni executor), as the in-process engine does: one
            # process start fewer, which here is most of a small model's start-up (about 25 s instead of 80).
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if self.kv_cache_bytes is not None:
            # vLLM-CPU lets VLLM_CPU_KVCACHE_SPACE override the flag, so the variable must go.
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)
            command += ["--kv-cache-memory-bytes", str(self.kv_cache_bytes)]
        command += list(self.extra_args)
        if self.otlp_endpoint:
            command += ["--otlp-traces-endpoint", self.otlp_endpoint]
            env |= {"OTEL_SERVICE_NAME": f"vllm-{self.name}", "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true"}
        return command, env

    def start(self) -> None:
        command, env = self.launch()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603 (our own vllm binary and arguments)
                command,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its engine process dies with it on kill
            )

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BenchFailure(f"replica {self.url} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise BenchFailure(f"replica {self.url} not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def kill_engine_core(self, timeout_s: float = 60.0) -> bool:
        """SIGKILL the replica's engine-core process alone, as an engine crash would, and wait (bounded) until
        its API server notices and stops answering `/health` with 200. False when no engine process was found."""
        import psutil

        if self.proc is None:
            return False
        cores = [
            c
            for c in psutil.Process(self.proc.pid).children(recursive=True)
            if "EngineCore" in " ".join(_cmdline(c)) or "EngineCor" in c.name()  # comm is cut at 15 characters
        ]
        if not cores:
            return False
        for core in cores:
            with suppress(psutil.NoSuchProcess):
                core.kill()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return True
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code != 200:
                    return True
            except httpx.HTTPError:
                return True
            time.sleep(0.2)
        raise BenchFailure(f"replica {self.url} still healthy {timeout_s:.0f} s after its engine core was killed")

    def kill(self) -> None:
        """SIGKILL the replica and its engine process, as a crashed machine would."""
        if self.proc is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc = None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no replica log)"


@contextmanager
def running_replicas(
    checkpoint: Path,
    name: str,
    count: int,
    log_dir: Path,
    *,
    runner: str = "generate",
    otlp_endpoint: str | None = None,
    kv_cache_bytes: int | None = None,
) -> Iterator[Sequence[Replica]]:
    """`count` replicas of `checkpoint` serving model `name`, started together and stopped on exit."""
    replicas = [
        Replica(
            checkpoint,
            name,
            free_port(),
            log_dir / f"{name}-replica-{i}.log",
            runner=runner,
            otlp_endpoint=otlp_endpoint,
            kv_cache_bytes=kv_cache_bytes,
        )
        for i in range(count)
    ]
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            r.wait_ready()
        yield replicas
    finally:
        for r in replicas:
            r.stop()


def _cmdline(process: Any) -> list[str]:
    import psutil

    try:
        return list(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
