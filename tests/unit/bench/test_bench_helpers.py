"""The benches' pure parts: report checks, /metrics label filters, the smoke workload, and the CLI's arguments."""

import argparse

import httpx
import pytest

from bench import common
from bench.cli import add_bench_parser
from bench.common import BenchFailure, check_report
from bench.encoders import _workload
from bench.pipeline import FULL, SMOKE, _live_pools


def test_check_report_accepts_sane_numbers():
    check_report({"a": 1.5, "b": {"c": 0}}, positive=["a"], non_negative=["b.c"])


@pytest.mark.parametrize(
    ("report", "positive", "non_negative"),
    [
        ({"a": 0}, ["a"], []),
        ({"a": -1}, [], ["a"]),
        ({"a": float("nan")}, ["a"], []),
        ({"a": float("inf")}, ["a"], []),
        ({"a": True}, ["a"], []),
        ({"a": "1"}, ["a"], []),
        ({"a": {}}, ["a.b"], []),
    ],
)
def test_check_report_fails_on_nonsense(report, positive, non_negative):
    with pytest.raises(BenchFailure):
        check_report(report, positive=positive, non_negative=non_negative)


def test_metric_sums_only_the_asked_labels(monkeypatch):
    text = "\n".join(
        [
            "# HELP tessera_engine_preemptions_total x",
            'tessera_engine_preemptions_total{model="adm-on"} 2.0',
            'tessera_engine_preemptions_total{model="adm-off"} 5.0',
            'tessera_requests_total{model="adm-on",modalities="text,image",status="ok"} 3.0',
            "tessera_other 7.0",
        ]
    )
    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(200, text=text))
    assert common.metric("http://x", "tessera_engine_preemptions_total") == 7.0
    assert common.metric("http://x", "tessera_engine_preemptions_total", model="adm-off") == 5.0
    assert common.metric("http://x", "tessera_requests_total", modalities="text,image") == 3.0
    assert common.metric("http://x", "tessera_other") == 7.0
    assert common.metric("http://x", "tessera_missing") == 0.0


def test_every_workload_size_repeats_an_image():
    for n in (2, 3, 6, 60):
        seeds = _workload(n, 0.3)
        assert len(seeds) == n
        assert len(set(seeds)) < n


def test_smoke_is_smaller_and_skips_one_engine(tmp_path):
    assert SMOKE.admission_burst < FULL.admission_burst
    assert [p["name"] for p in _live_pools(tmp_path, FULL)] == ["small", "adm-on", "adm-off"]
    assert [p["name"] for p in _live_pools(tmp_path, SMOKE)] == ["adm-on", "adm-off"]


@pytest.mark.parametrize("kind", ["pipeline", "latency", "tenancy", "cost"])
def test_each_bench_needs_json_and_takes_smoke(kind):
    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", kind, "--json", "out.json", "--smoke"])
    assert (args.bench_command, str(args.json), args.smoke) == (kind, "out.json", True)
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", kind])


def test_a_bench_server_states_its_own_settings_but_keeps_the_staged_weights_switch(monkeypatch, tmp_path):
    from bench.server import _server_env
    from demo.checkpoints import SERVE_STAGED_ENV

    monkeypatch.setenv("TESSERA_ROUTING_POLICY", "strongest")
    monkeypatch.setenv(SERVE_STAGED_ENV, "1")
    env = _server_env(8123, str(tmp_path), tmp_path, [{"name": "large"}], {"TESSERA_GROUNDING": "false"})
    assert "TESSERA_ROUTING_POLICY" not in env  # inherited settings would make runs incomparable
    assert env[SERVE_STAGED_ENV] == "1"  # the pools were built with staged weights: the server must not rebuild them
    assert (env["TESSERA_PORT"], env["TESSERA_GROUNDING"]) == ("8123", "false")
    monkeypatch.delenv(SERVE_STAGED_ENV)
    assert SERVE_STAGED_ENV not in _server_env(8123, str(tmp_path), tmp_path, [{"name": "large"}], {})
