"""The Kubernetes manifests under deploy/k8s (and every YAML file under deploy/ parses): named, wired and
agreeing with `config.settings`."""

from __future__ import annotations

from urllib.parse import urlsplit

from config.settings import PoolSettings
from tests.deploy_files import (
    CLUSTER_SCOPED,
    COMPOSE,
    DEPLOY,
    GPU,
    K8S,
    NAMESPACE,
    SECRET_SETTINGS,
    SETTING_NAMES,
    VLLM_ENV,
    WORKLOADS,
    _check_replica,
    _find,
    _gateway,
    _gateway_container,
    _is_tessera_image,
    _is_vllm,
    _k8s_env,
    _load,
    _of_kind,
    _pod,
    _pod_labels,
    _raw_pools,
    _replica_host,
    _settings,
)

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
