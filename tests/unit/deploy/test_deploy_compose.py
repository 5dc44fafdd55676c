"""deploy/docker-compose.yml: its services, settings, replicas and health checks, and that it serves what
Kubernetes does; the health checks themselves, run against a stand-in gateway."""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

import pytest

from config.settings import PoolSettings
from tests.deploy_files import (
    COMPOSE,
    DEPLOY,
    SETTING_NAMES,
    VLLM_ENV,
    Doc,
    _check_replica,
    _env,
    _gateway_container,
    _interpolate,
    _is_gateway,
    _k8s_env,
    _raw_pools,
    _replica_host,
    _services,
    _settings,
)


def test_compose_depends_on_names_existing_services(compose):
    services = _services(compose)
    conditions = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, service in services.items():
        depends = service.get("depends_on", {})
        for dependency in depends:
            assert dependency in services, f"{name} depends on missing {dependency}"
            assert dependency != name
            if isinstance(depends, dict):
                assert depends[dependency]["condition"] in conditions
                if depends[dependency]["condition"] == "service_healthy":
                    assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck to wait for"


def test_compose_gateway_environment_is_settings(compose, monkeypatch):
    gateways = [s for s in _services(compose).values() if _is_gateway(s)]
    assert len(gateways) >= 2
    for service in [*gateways, _services(compose)["migrate"]]:
        names = set(_env(service))
        assert names <= SETTING_NAMES, f"not settings (silently ignored): {names - SETTING_NAMES}"
    env = {k: _interpolate(v) for k, v in _env(gateways[0]).items()}
    settings = _settings(env, monkeypatch)
    assert [p.name for p in settings.pools] == ["small", "large"]
    assert settings.redis_url
    assert settings.database_url
    for url in (settings.redis_url, settings.database_url):
        assert urlsplit(url).hostname in _services(compose)
    # Every variable compose requires from deploy/.env is in the example file.
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text()))
    example = (DEPLOY / ".env.example").read_text()
    for name in required:
        assert re.search(rf"^{name}=", example, re.MULTILINE), f"{name} is missing from deploy/.env.example"


def test_compose_pool_replicas_are_vllm_services_on_their_own_gpus(compose, monkeypatch):
    services = _services(compose)
    gateway = next(s for s in services.values() if _is_gateway(s))
    env = {k: _interpolate(v) for k, v in _env(gateway).items()}
    settings = _settings(env, monkeypatch)
    taken: dict[str, str] = {}
    named = set()
    for raw in _raw_pools(env):
        pool = PoolSettings.model_validate(raw)
        for url in raw["replicas"]:
            host, port = _replica_host(url)
            assert host in services, f"{url}: no compose service {host}"
            named.add(host)
            service = services[host]
            (devices,) = service["deploy"]["resources"]["reservations"]["devices"]
            assert devices["driver"] == "nvidia"
            assert "gpu" in devices["capabilities"]
            for gpu in devices["device_ids"]:
                assert gpu not in taken, f"GPU {gpu} given to both {taken[gpu]} and {host}"
                taken[gpu] = host
            _check_replica(service["command"], pool, port, len(devices["device_ids"]), settings.max_images_per_request)
            assert _env(service).items() >= VLLM_ENV.items()
            assert any(v.startswith("models:/models") for v in service["volumes"])
    vllm_services = {n for n, s in services.items() if s.get("command", [])[:2] == ["vllm", "serve"]}
    assert vllm_services == named, "every vLLM service serves a pool, and every replica URL is a service"
    for name, service in services.items():
        if not _is_gateway(service):
            continue
        # The gateways run the encoder pools: each on a GPU of its own, none shared with a replica.
        (devices,) = service["deploy"]["resources"]["reservations"]["devices"]
        for gpu in devices["device_ids"]:
            assert gpu not in taken, f"GPU {gpu} given to both {taken[gpu]} and {name}"
            taken[gpu] = name
        assert settings.encoder_device.startswith("cuda")


def test_compose_healthchecks_volumes_and_ports(compose, monkeypatch):
    services = _services(compose)
    for name, service in services.items():
        if _is_gateway(service) or service.get("command", [])[:2] == ["vllm", "serve"]:
            assert "/health" in " ".join(service["healthcheck"]["test"]), name
    gateways = {n: s for n, s in services.items() if _is_gateway(s)}
    settings = _settings({k: _interpolate(v) for k, v in _env(next(iter(gateways.values()))).items()}, monkeypatch)
    cache_mounts = set()
    for service in gateways.values():
        mounts = dict(reversed(v.split(":", 2)[:2]) for v in service["volumes"])
        cache_mounts.add(mounts[str(settings.embedding_cache_dir)])
    (shared,) = cache_mounts  # one named volume, shared by every gateway
    assert shared in compose["volumes"]
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source.startswith(("/", ".")) or source in compose["volumes"], volume
    published = [p.split(":")[0] for s in gateways.values() for p in s["ports"]]
    assert len(published) == len(set(published)) == len(gateways)


def test_compose_and_kubernetes_serve_the_same_pools(compose, k8s):
    gateway = next(s for s in _services(compose).values() if _is_gateway(s))

    def without_replicas(env: Mapping[str, str]) -> list[Doc]:
        return [{k: v for k, v in p.items() if k != "replicas"} for p in _raw_pools(env)]

    assert without_replicas(_env(gateway)) == without_replicas(_k8s_env(k8s))


# ---------------------------------------------------------------- the health checks themselves


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[http.server.HTTPServer, type[_Health]]]:
    handler = type("Handler", (_Health,), {})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def _run_probe(command: list[str], port: int) -> int:
    assert command[:2] == ["python", "-c"]
    script = command[2].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    assert f":{port}/health" in script
    return subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=30, check=False).returncode


def test_gateway_liveness_accepts_503_and_readiness_does_not(k8s, compose, health_server):
    server, handler = health_server
    port = server.server_address[1]
    liveness = _gateway_container(k8s)["livenessProbe"]["exec"]["command"]
    assert _gateway_container(k8s)["startupProbe"]["exec"]["command"] == liveness
    compose_check = next(s for s in _services(compose).values() if _is_gateway(s))["healthcheck"]["test"][1:]
    for status, alive, healthy in ((200, 0, 0), (503, 0, 1), (500, 1, 1)):
        handler.status = status
        assert _run_probe(liveness, port) == alive, f"liveness on {status}"
        assert _run_probe(compose_check, port) == healthy, f"compose healthcheck on {status}"
    server.shutdown()
    server.server_close()
    assert _run_probe(liveness, port) != 0, "a gateway that does not answer is not alive"
