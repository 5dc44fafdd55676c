"""The deployment files under deploy/: they parse, and agree with each other and with `api.settings`."""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy import create_engine, text

from api.settings import PoolSettings, Settings
from tests.dbs import PG_ADMIN

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
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


@pytest.fixture(scope="module")
def k8s() -> list[Doc]:
    return [doc for path in sorted(K8S.rglob("*.y*ml")) for doc in _load(path)]


@pytest.fixture(scope="module")
def compose() -> Doc:
    (doc,) = _load(COMPOSE)
    return doc


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
        assert pool.get("encoder_pools", True), "a remote pool needs encoder_pools: replicas take encoder outputs"
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
    assert int(options["--max-model-len"] or 0) == pool.max_model_len
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


# ---------------------------------------------------------------- every file


def test_every_yaml_file_under_deploy_parses():
    files = sorted(DEPLOY.rglob("*.y*ml"))
    assert COMPOSE in files
    assert len([f for f in files if f.parent == K8S]) >= 6
    # `kubectl apply -f deploy/k8s/` is not recursive: the Secret template (placeholders) lives one folder down.
    top_level = [d for f in files if f.parent == K8S for d in _load(f)]
    assert not [d for d in top_level if d["kind"] == "Secret"]
    for path in files:
        docs = _load(path)
        assert docs, f"{path} is empty"
        assert all(isinstance(d, dict) for d in docs), path


# ---------------------------------------------------------------- Kubernetes


def test_k8s_objects_are_named_and_namespaced(k8s):
    seen = set()
    for doc in k8s:
        assert doc.get("apiVersion"), doc
        assert doc.get("kind"), doc
        name = doc.get("metadata", {}).get("name")
        assert isinstance(name, str)
        assert name
        assert (doc["kind"], name) not in seen, f"{doc['kind']}/{name} defined twice"
        seen.add((doc["kind"], name))
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']}/{name}"
    assert ("Namespace", NAMESPACE) in seen


def test_k8s_selectors_match_pod_labels_and_ports(k8s):
    workloads = _of_kind(k8s, *WORKLOADS)
    assert len(workloads) >= 5
    for workload in workloads:
        labels = _pod_labels(workload)
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items(), workload["metadata"]["name"]
    for service in _of_kind(k8s, "Service"):
        selector = service["spec"]["selector"]
        targets = [w for w in workloads if selector.items() <= _pod_labels(w).items()]
        assert len(targets) == 1, f"Service {service['metadata']['name']} selects {len(targets)} workloads"
        ports = [p for c in _pod(targets[0])["containers"] for p in c.get("ports", [])]
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            key = "name" if isinstance(target, str) else "containerPort"
            assert any(p.get(key) == target for p in ports), f"{service['metadata']['name']}: no port {target}"
    for pdb in _of_kind(k8s, "PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        assert any(selector.items() <= _pod_labels(w).items() for w in workloads)


def test_k8s_http_probes_hit_health(k8s):
    for workload in _of_kind(k8s, *WORKLOADS):
        for container in _pod(workload)["containers"]:
            name = f"{workload['metadata']['name']}/{container['name']}"
            probes = {k: v for k, v in container.items() if k.endswith("Probe")}
            assert "readinessProbe" in probes, name
            assert "livenessProbe" in probes, name
            for kind, probe in probes.items():
                if "httpGet" in probe:
                    assert probe["httpGet"]["path"] == "/health", f"{name} {kind}"
                elif _is_tessera_image(container):
                    assert "/health" in " ".join(probe["exec"]["command"]), f"{name} {kind}"
            if _is_tessera_image(container):
                # Readiness is the strict one: out of rotation unless /health answers 200.
                assert probes["readinessProbe"]["httpGet"]["path"] == "/health", name
            if _is_vllm(container):
                startup = probes["startupProbe"]
                assert startup["httpGet"]["path"] == "/health", name
                budget_s = startup["periodSeconds"] * startup["failureThreshold"]
                assert budget_s >= 600, f"{name}: {budget_s}s is too short to load weights"


def test_k8s_pool_replicas_resolve_to_statefulsets_behind_headless_services(k8s, monkeypatch):
    env = _k8s_env(k8s)
    settings = _settings(env, monkeypatch)
    serving: set[str] = set()
    for raw in _raw_pools(env):
        pool = PoolSettings.model_validate(raw)
        ordinals: dict[str, set[int]] = {}
        for url in raw["replicas"]:
            host, port = _replica_host(url)
            pod, service_name = host.split(".")
            statefulset_name, ordinal = pod.rsplit("-", 1)
            ordinals.setdefault(statefulset_name, set()).add(int(ordinal))
            statefulset = _find(k8s, "StatefulSet", statefulset_name)
            assert statefulset["spec"]["serviceName"] == service_name, url
            service = _find(k8s, "Service", service_name)
            assert service["spec"].get("clusterIP") == "None", f"{service_name} must be headless for pod DNS"
            assert service["spec"]["selector"].items() <= _pod_labels(statefulset).items()
            assert port in [p["port"] for p in service["spec"]["ports"]]
            (container,) = [c for c in _pod(statefulset)["containers"] if _is_vllm(c)]
            assert port in [p["containerPort"] for p in container["ports"]]
            gpus = container["resources"]["limits"][GPU]
            assert container["resources"]["requests"][GPU] == gpus
            _check_replica(container["command"], pool, port, gpus, settings.max_images_per_request)
            assert {e["name"]: e["value"] for e in container["env"]}.items() >= VLLM_ENV.items()
        for statefulset_name, seen in ordinals.items():
            replicas = _find(k8s, "StatefulSet", statefulset_name)["spec"]["replicas"]
            # Exactly the pods the gateway knows of: a missing one fails requests, an extra one idles its GPUs.
            assert seen == set(range(replicas)), f"{pool.name}: URLs name ordinals {seen}, {replicas} replicas"
            serving.add(statefulset_name)
    vllm_sets = {
        s["metadata"]["name"] for s in _of_kind(k8s, "StatefulSet") if any(map(_is_vllm, _pod(s)["containers"]))
    }
    assert vllm_sets == serving, "every vLLM StatefulSet serves a pool, and every pool's replicas exist"


def test_k8s_gateway_environment_is_settings(k8s, monkeypatch):
    config = _find(k8s, "ConfigMap", "tessera-config")["data"]
    secret = _find(k8s, "Secret", "tessera-secrets")["stringData"]
    assert set(config) <= SETTING_NAMES, f"not settings (silently ignored): {set(config) - SETTING_NAMES}"
    assert not set(config) & SECRET_SETTINGS, "secrets belong in the Secret"
    tessera_secrets = {k for k in secret if k.startswith("TESSERA_")}
    assert tessera_secrets <= SETTING_NAMES, tessera_secrets - SETTING_NAMES
    assert {k for k in secret if k not in tessera_secrets} <= {"POSTGRES_PASSWORD"}
    assert {"TESSERA_DATABASE_URL", "TESSERA_ADMIN_KEY", "TESSERA_KEY_SECRET"} <= tessera_secrets
    for key, value in secret.items():
        assert value == "" or "REPLACE_ME" in value, f"{key}: the template must hold placeholders only"
    assert secret["POSTGRES_PASSWORD"] in secret["TESSERA_DATABASE_URL"]

    settings = _settings(_k8s_env(k8s), monkeypatch)
    assert [p.name for p in settings.pools] == ["small", "large"]
    assert settings.build_demo_models is False
    assert not settings.demo_tenant
    assert settings.redis_url
    assert settings.database_url
    redis = urlsplit(settings.redis_url)
    database = urlsplit(settings.database_url)
    assert database.scheme == "postgresql+psycopg"
    for url, statefulset_or_deployment in ((redis, "Deployment"), (database, "StatefulSet")):
        service = _find(k8s, "Service", str(url.hostname))
        assert url.port in [p["port"] for p in service["spec"]["ports"]]
        _find(k8s, statefulset_or_deployment, str(url.hostname))
    postgres = _pod(_find(k8s, "StatefulSet", "postgres"))["containers"][0]
    password_ref = next(e for e in postgres["env"] if e["name"] == "POSTGRES_PASSWORD")["valueFrom"]["secretKeyRef"]
    assert password_ref["key"] in secret


def test_k8s_volumes_exist_and_the_embedding_cache_is_shared(k8s, monkeypatch):
    claims = {d["metadata"]["name"]: d for d in _of_kind(k8s, "PersistentVolumeClaim")}
    for workload in _of_kind(k8s, *WORKLOADS):
        templates = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
        volumes = {v["name"]: v for v in _pod(workload).get("volumes", [])}
        for container in _pod(workload)["containers"] + _pod(workload).get("initContainers", []):
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in templates, mount
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, volume
    assert "ReadWriteMany" in claims["tessera-embeddings"]["spec"]["accessModes"]

    gateway = _gateway(k8s)
    assert gateway["spec"]["replicas"] >= 2
    resources = _gateway_container(k8s)["resources"]
    # The gateways run the encoder pools; on a GPU exactly when they are given one.
    gpus = resources["limits"].get(GPU, 0)
    assert resources["requests"].get(GPU, 0) == gpus
    assert bool(gpus) == _settings(_k8s_env(k8s), monkeypatch).encoder_device.startswith("cuda")
    settings = _settings(_k8s_env(k8s), monkeypatch)
    volumes = {v["name"]: v for v in _pod(gateway)["volumes"]}
    mounts = {m["mountPath"]: m for m in _gateway_container(k8s)["volumeMounts"]}
    cache = mounts[str(settings.embedding_cache_dir)]
    assert volumes[cache["name"]]["persistentVolumeClaim"]["claimName"] == "tessera-embeddings"
    assert not cache.get("readOnly")
    assert not mounts[str(settings.data_dir)].get("readOnly")
    for pool in settings.pools:
        assert pool.model
        assert any(pool.model.startswith(path + "/") for path in mounts), f"{pool.model} is not mounted"
    (migrate,) = _pod(gateway)["initContainers"]
    assert migrate["command"][-1] == "/app/deploy/migrate.py"
    assert migrate["envFrom"] == _gateway_container(k8s)["envFrom"]


# ---------------------------------------------------------------- Docker Compose


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


# ---------------------------------------------------------------- deploy/migrate.py


def _migrate_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tessera_deploy_migrate", DEPLOY / "migrate.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def pg_url() -> Iterator[str]:
    name = f"tessera_deploy_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is required for this test: {exc}")
    try:
        yield PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def test_migrate_lets_replicas_starting_together_migrate_an_empty_database(pg_url):
    # Separate processes, as separate pods are: alembic keeps its migration context in a module global.
    env = {**os.environ, "TESSERA_DATABASE_URL": pg_url}
    procs = [
        subprocess.Popen(
            [sys.executable, str(DEPLOY / "migrate.py")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for _ in range(3)
    ]
    try:
        outputs = [proc.communicate(timeout=120)[0].decode() for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            versions = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
            tables = conn.execute(
                text("SELECT count(*) FROM pg_tables WHERE tablename = 'inference_requests'")
            ).scalar()
    finally:
        engine.dispose()
    assert len(versions) == 1
    assert tables == 1


def test_migrate_on_sqlite_needs_no_lock(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    _migrate_module().migrate(url)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    finally:
        engine.dispose()
