"""The fleet and load benches' verdicts over repeated runs, the prefix pressure, and the replicas' KV flag."""

from pathlib import Path

import pytest

from bench.fleet import FULL_PLAN, SMOKE_PLAN, prefix_pressure, verdict
from bench.replicas import Replica


def _round(picker: tuple[float, float], round_robin: tuple[float, float]) -> dict:
    def phase(p50: float, p99: float) -> dict:
        return {"latency": {"overall": {"ttft_p50_ms": p50, "ttft_p99_ms": p99}}}

    return {"picker": phase(*picker), "round_robin": phase(*round_robin)}


def test_the_verdict_is_the_median_of_each_rounds_ratio_with_its_spread():
    rounds = [_round((90, 300), (100, 500)), _round((100, 450), (100, 500)), _round((120, 200), (100, 400))]
    result = verdict(rounds)
    p99 = result["ratios"]["ttft_p99_picker_over_round_robin"]
    p50 = result["ratios"]["ttft_p50_picker_over_round_robin"]
    assert p99["per_round"] == [0.6, 0.9, 0.5]
    assert (p99["median"], p99["min"], p99["max"]) == (0.6, 0.5, 0.9)
    assert (p50["median"], p50["min"], p50["max"]) == (1.0, 0.9, 1.2)
    assert result["target"]["met"] is True
    assert "median of 0.60, 0.90, 0.50" in result["target"]["summary"]


def test_a_median_p50_above_the_bound_misses_the_target():
    rounds = [_round((110, 300), (100, 500)), _round((108, 300), (100, 500))]
    assert verdict(rounds)["target"]["met"] is False


def test_prefix_pressure_compares_the_prefixes_with_one_replicas_cache():
    phase = {"fresh_cache_check": {"text_prompt_tokens": 900}}
    pressure = prefix_pressure(FULL_PLAN.sizes, phase, [32_768, 32_768])
    assert pressure["distinct_prefixes"] == 48
    assert pressure["prefix_tokens_total"] == 43_200
    assert pressure["prefixes_over_one_replica"] == pytest.approx(1.32, abs=0.01)
    assert pressure["their_share_over_one_replica"] == pytest.approx(0.66, abs=0.01)


def test_the_full_plan_alternates_enough_rounds_of_enough_requests():
    assert FULL_PLAN.rounds >= 2
    assert FULL_PLAN.sizes.requests >= 600
    assert SMOKE_PLAN.sizes.requests < FULL_PLAN.sizes.requests


def test_a_shrunken_replica_cache_is_a_flag_and_the_legacy_variable_is_gone(tmp_path: Path):
    command, env = Replica(tmp_path, "small", 8000, tmp_path / "log", kv_cache_bytes=1 << 26).launch()
    assert command[command.index("--kv-cache-memory-bytes") + 1] == str(1 << 26)
    assert "VLLM_CPU_KVCACHE_SPACE" not in env
    command, env = Replica(tmp_path, "small", 8000, tmp_path / "log").launch()
    assert "--kv-cache-memory-bytes" not in command
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_load_goodputs_and_ratio_are_medians_over_repeats():
    from bench.load import summarise

    def repeat(vllm: float, tessera: float) -> dict:
        servers = {
            "vllm": {"mixed": {"goodput_rps": vllm}, "text": {"goodput_rps": 2 * vllm}},
            "tessera": {"mixed": {"goodput_rps": tessera}, "text": {"goodput_rps": 2 * tessera}},
        }
        return {"servers": servers, "goodput_ratio": {"mixed": tessera / vllm, "text": tessera / vllm}}

    summary = summarise([repeat(8, 16), repeat(16, 24), repeat(8, 24)])
    assert summary["goodput_rps"]["vllm"]["mixed"] == {"median": 8, "min": 8, "max": 16, "per_repeat": [8, 16, 8]}
    assert summary["goodput_rps"]["tessera"]["text"]["median"] == 48
    assert summary["goodput_ratio"]["mixed"]["median"] == 2.0
    assert summary["goodput_ratio"]["mixed"]["min"] == 1.5
