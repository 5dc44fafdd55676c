"""Reading the deployment files under deploy/ for their tests (tests/unit/deploy): the manifests, the compose file,
the gateway's settings they set and the vLLM replicas they start."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from config.settings import CHAT_MAX_MODEL_LEN, PoolSettings, Settings

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "docker-compose.yml"
NAMESPACE = "tessera"
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding"}
WORKLOADS = {"Deployment", "StatefulSet"}
SETTING_NAMES = {f"TESSERA_{name.upper()}" for name in Settings.model_fields}
# Pool keys the gateway reads besides PoolSettings' fields (`replicas` makes a pool remote).
POOL_KEYS = set(PoolSettings.model_fields) | {"replicas"}
SECRET_SETTINGS = {
    "TESSERA_DATABASE_URL",
    "TESSERA_ADMIN_KEY",
    "TESSERA_KEY_SECRET",
    "TESSERA_API_KEY",
    "TESSERA_STRIPE_API_KEY",
    "TESSERA_STRIPE_WEBHOOK_SECRET",
}
VLLM_SWITCHES = ("--enable-scale-out", "--enable-prompt-tokens-details", "--enable-prefix-caching")
VLLM_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
GPU = "nvidia.com/gpu"

Doc = dict[str, Any]


# ---------------------------------------------------------------- loading


def _load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _find(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} named {name!r}, found {len(found)}"
    return found[0]


def _of_kind(docs: list[Doc], *kinds: str) -> list[Doc]:
    return [d for d in docs if d["kind"] in kinds]


def _pod(workload: Doc) -> Doc:
    return workload["spec"]["template"]["spec"]


def _pod_labels(workload: Doc) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def _is_vllm(container: Doc) -> bool:
    return container.get("command", [])[:2] == ["vllm", "serve"]


def _is_tessera_image(container: Doc) -> bool:
    return container["image"].rsplit("/", 1)[-1].startswith("tessera:")


def _gateway(k8s: list[Doc]) -> Doc:
    return _find(k8s, "Deployment", "tessera-gateway")


def _gateway_container(k8s: list[Doc]) -> Doc:
    (container,) = [c for c in _pod(_gateway(k8s))["containers"] if c["name"] == "gateway"]
    return container


def _k8s_env(k8s: list[Doc]) -> dict[str, str]:
    """What the gateway container's environment is: the ConfigMap, then the Secret (envFrom order)."""
    env: dict[str, str] = {}
    for source in _gateway_container(k8s)["envFrom"]:
        if "configMapRef" in source:
            env.update(_find(k8s, "ConfigMap", source["configMapRef"]["name"])["data"])
        else:
            env.update(_find(k8s, "Secret", source["secretRef"]["name"])["stringData"])
    return env


def _settings(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings exactly as a gateway with this environment would read them."""
    for key in [k for k in os.environ if k.upper().startswith("TESSERA_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings()


def _raw_pools(env: Mapping[str, str]) -> list[Doc]:
    pools = json.loads(env["TESSERA_POOLS"])
    assert isinstance(pools, list)
    assert pools, "TESSERA_POOLS names no pool"
    for pool in pools:
        assert set(pool) <= POOL_KEYS, f"unknown pool keys {set(pool) - POOL_KEYS}"
        assert pool["replicas"], f"pool {pool['name']} lists no replica"
        # The manifests' replicas run with --mm-processor-cache-gb 0, which suits gateway-encoded media only.
        assert pool.get("encoder_pools", "auto") is not False, "these replicas expect the gateway's encoder outputs"
    assert len({p["name"] for p in pools}) == len(pools)
    return pools


# ---------------------------------------------------------------- a vLLM replica's command line


def _vllm_options(command: list[str]) -> tuple[str, dict[str, str | None]]:
    assert command[:2] == ["vllm", "serve"], command
    model, rest = command[2], command[3:]
    options: dict[str, str | None] = {}
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag.startswith("--"), f"stray argument {flag!r} in {command}"
        assert flag not in options, f"{flag} given twice"
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            options[flag], i = rest[i + 1], i + 2
        else:
            options[flag], i = None, i + 1
    return model, options


def _check_replica(command: list[str], pool: PoolSettings, port: int, gpus: int, max_images: int) -> None:
    """The replica serves this pool's checkpoint under its name, as the gateway expects to talk to it."""
    model, options = _vllm_options(command)
    assert model == pool.model, "the replica must load the checkpoint the gateway reads the tokenizer of"
    assert options.get("--served-model-name") == pool.name
    assert options.get("--port") == str(port)
    assert int(options["--tensor-parallel-size"] or 0) == gpus, "tensor parallelism must use every GPU given"
    assert int(options["--max-model-len"] or 0) == (pool.max_model_len or CHAT_MAX_MODEL_LEN)
    assert options.get("--scheduling-policy") == "priority"
    assert options.get("--mm-processor-cache-gb") == "0", "every request carries its encoder outputs"
    for switch in VLLM_SWITCHES:
        assert switch in options, f"{switch} missing"
        assert options[switch] is None
    limits = json.loads(options["--limit-mm-per-prompt"] or "{}")
    assert limits["image"] >= max_images, "vLLM would refuse requests the gateway admits"
    assert limits["audio"] >= 1
    assert limits.get("video", 0) == 0


def _replica_host(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.scheme == "http", url
    assert parts.hostname
    assert parts.port
    assert parts.path in ("", "/"), url
    return parts.hostname, parts.port


def _services(compose: Doc) -> dict[str, Doc]:
    return compose["services"]


def _env(service: Doc) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _is_gateway(service: Doc) -> bool:
    return service.get("command", [])[:2] == ["tessera", "serve"]


_INTERPOLATION = re.compile(r"\$\{(\w+)(?::?([-?])([^}]*))?\}")


def _interpolate(value: str) -> str:
    """What compose substitutes: `${X:-default}` -> default, `${X:?message}` -> a stand-in value."""
    return _INTERPOLATION.sub(lambda m: m[3] if m[2] == "-" else f"test-{m[1].lower()}", value)
