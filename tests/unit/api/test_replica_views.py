"""Each remote replica's state reaches /health, /metrics and the admin overview."""

from __future__ import annotations

import asyncio

from api.routes.ops import health
from console.live import live_figures
from serving.metrics import ServerMetrics
from serving.pools import ModelPool, PoolRegistry
from tests.stubs import StubEngine

ROWS = [
    {
        "name": "10.0.0.1:8000",
        "url": "http://10.0.0.1:8000",
        "state": "up",
        "in_flight": 2,
        "running": 3,
        "waiting": 1,
        "kv_cache_usage": 0.25,
        "prefix_cache_hit_rate": 0.5,
        "picks": 10,
        "affinity_picks": 7,
        "ejected_for_s": None,
    },
    {
        "name": "10.0.0.2:8000",
        "url": "http://10.0.0.2:8000",
        "state": "ejected",
        "in_flight": 0,
        "running": 0,
        "waiting": 0,
        "kv_cache_usage": 0.0,
        "prefix_cache_hit_rate": None,
        "picks": 4,
        "affinity_picks": 1,
        "ejected_for_s": 3.2,
    },
]


def _pools() -> PoolRegistry:
    engine = StubEngine()
    engine.replica_rows = ROWS
    return PoolRegistry([ModelPool("small", engine, modalities=["text"])])


def test_metrics_label_each_replica():
    metrics = ServerMetrics()
    metrics.attach_pools(_pools(), None)
    text = metrics.render().decode()
    assert 'tessera_replica_up{model="small",replica="10.0.0.1:8000"} 1.0' in text
    assert 'tessera_replica_up{model="small",replica="10.0.0.2:8000"} 0.0' in text
    assert 'tessera_replica_in_flight_requests{model="small",replica="10.0.0.1:8000"} 2.0' in text
    assert 'tessera_replica_affinity_picks_total{model="small",replica="10.0.0.1:8000"} 7.0' in text


def test_health_lists_replicas_and_in_process_pools_do_not():
    response = asyncio.run(health.fn(_pools()))
    assert response.content["engines"]["small"]["replicas"] == ROWS
    plain = asyncio.run(health.fn(PoolRegistry([ModelPool("small", StubEngine(), modalities=["text"])])))
    assert "replicas" not in plain.content["engines"]["small"]


def test_admin_overview_has_a_row_per_replica():
    metrics = ServerMetrics()
    pools = _pools()
    metrics.attach_pools(pools, None)
    live = live_figures(metrics, pools, None)
    assert [(r["pool"], r["name"], r["state"]) for r in live["replicas"]] == [
        ("small", "10.0.0.1:8000", "up"),
        ("small", "10.0.0.2:8000", "ejected"),
    ]


def test_admin_overview_renders_the_replica_table():
    from pathlib import Path

    from jinja2 import Environment, FileSystemLoader

    metrics = ServerMetrics()
    pools = _pools()
    metrics.attach_pools(pools, None)
    env = Environment(loader=FileSystemLoader(Path(__file__).resolve().parents[3] / "templates"), autoescape=True)
    html = env.get_template("console/admin/_live.html.jinja2").render(live=live_figures(metrics, pools, None))
    assert 'id="live-replicas"' in html
    assert '<tr data-replica="10.0.0.2:8000">' in html
    assert "ejected (3 s)" in html
    assert "10 (7)" in html


class _TaskEngine:
    """An embedding engine as the overview reads it: healthy, with remote replicas of its own."""

    def is_healthy(self) -> bool:
        return True

    def replicas(self) -> list[dict]:
        return [ROWS[0]]


def test_admin_overview_lists_embedding_and_transcription_pools():
    from pathlib import Path

    from jinja2 import Environment, FileSystemLoader

    from serving.pools import TaskPool

    metrics = ServerMetrics()
    engine = StubEngine()
    task = TaskPool("minilm", "embedding", _TaskEngine(), tokenizer=None)
    pools = PoolRegistry([ModelPool("small", engine, modalities=["text"])], [task])
    metrics.live.finished("minilm", None)
    live = live_figures(metrics, pools, None)
    (row,) = live["tasks"]
    assert (row["name"], row["kind"], row["up"], row["slots"]) == ("minilm", "embedding", True, 8)
    assert row["rps"] == 1 / 60
    assert [(r["pool"], r["name"]) for r in live["replicas"]] == [("minilm", "10.0.0.1:8000")]
    env = Environment(loader=FileSystemLoader(Path(__file__).resolve().parents[3] / "templates"), autoescape=True)
    html = env.get_template("console/admin/_live.html.jinja2").render(live=live)
    assert '<tr data-pool="minilm">' in html
    assert "<td>embeddings</td>" in html
    assert "<td>0 / 8</td>" in html
