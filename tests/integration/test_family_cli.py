"""The command line on checkpoints of other families, with no engine: `tessera serve` refuses `encoder_pools: true`
for an architecture without an adapter before anything starts, and `tessera models inspect` says what Tessera does
with a checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from demo.family_checkpoints import build_family_checkpoint
from tests.conftest import MODELS_DIR, REPO, free_port

FAMILY_DIR = MODELS_DIR / "families"


def _tessera(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tessera", *args],
        check=False,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_encoder_pools_true_for_an_unadapted_architecture_is_refused_before_start(tmp_path):
    text_only = build_family_checkpoint("qwen2_text", FAMILY_DIR / "qwen2_text")
    pools = [{"name": "txt", "model": str(text_only), "encoder_pools": True}]
    env = {"TESSERA_DATA_DIR": str(tmp_path), "TESSERA_PORT": str(free_port()), "TESSERA_POOLS": json.dumps(pools)}
    done = _tessera("serve", env=env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("error: pool 'txt': encoder_pools is true")
    assert "Qwen2ForCausalLM" in message
    assert "starting engine" not in done.stderr


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        (
            "qwen2_5_vl",
            {
                "architecture": "Qwen2_5_VLForConditionalGeneration",
                "adapter": "qwen2.5-vl",
                "modalities": ["text", "image"],
                "encoding": {"inprocess": {"image": "gateway"}, "remote": {"image": "gateway"}},
                "tokens": {"image 640x480": 54},
            },
        ),
        (
            "qwen3_omni_moe",
            {
                "architecture": "Qwen3OmniMoeForConditionalGeneration",
                "adapter": "qwen3-omni-moe",
                "modalities": ["text", "image", "audio"],
                "encoding": {
                    "inprocess": {"image": "engine", "audio": "features"},
                    "remote": {"image": "gateway", "audio": "features"},
                },
                "tokens": {"image 640x480": 48, "audio 10 s": 130},
            },
        ),
        (
            "qwen2_text",
            {
                "architecture": "Qwen2ForCausalLM",
                "adapter": None,
                "modalities": ["text"],
                "encoding": {"inprocess": {}, "remote": {}},
                "tokens": {},
            },
        ),
    ],
)
def test_models_inspect_reports_architecture_encoding_counts_and_the_replica_line(family, expected):
    path = build_family_checkpoint(family, FAMILY_DIR / family)
    done = _tessera("models", "inspect", str(path), "--json", env={"HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert {k: found[k] for k in expected} == expected
    assert found["replica_command"].startswith(f"vllm serve {path} --served-model-name {family} ")
    assert "--enable-scale-out" in found["replica_command"]
    # A replica that encodes media itself keeps its processor cache, where repeated media land again.
    engine_encodes = "engine" in found["encoding"]["remote"].values()
    assert ("--mm-processor-cache-gb" in found["replica_command"]) != engine_encodes


def test_models_inspect_refuses_a_folder_that_is_not_a_checkpoint(tmp_path):
    done = _tessera("models", "inspect", str(tmp_path))
    assert done.returncode == 1
    assert "no config.json" in done.stderr
