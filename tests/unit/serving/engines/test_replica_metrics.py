"""Reading a vLLM replica's `/metrics` (serving.engines.replica_metrics)."""

import pytest

from serving.engines.replica_metrics import ReplicaMetrics, parse_vllm_metrics
from tests.vllm_metrics import vllm_metrics


def test_parses_vllm_exposition_summing_engines():
    m = parse_vllm_metrics(vllm_metrics(), now=12.5)
    assert (m.running, m.waiting) == (5, 1)  # waiting_by_reason is another metric
    assert m.kv_cache_usage == pytest.approx(0.5)  # a fraction: the mean over engines, not the sum
    assert (m.prefix_cache_queries, m.prefix_cache_hits) == (1500.0, 750.0)  # `_created` is not the counter
    assert m.prefix_cache_hit_rate == pytest.approx(0.5)
    assert (m.num_gpu_blocks, m.block_size) == (4096, 16)
    assert m.scraped_at == 12.5


def test_parse_is_tolerant():
    text = "\n".join(
        [
            "garbage without a value",
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="a \\"quoted\\", {odd} name"} 4 1700000000000',
            "vllm:num_requests_running{engine=broken} 9",
            'vllm:num_requests_waiting{engine="0"} not-a-number',
            'vllm:kv_cache_usage_perc{engine="0"} NaN',
            'vllm:prefix_cache_queries{engine="0"} 10',  # the bare counter name
            'vllm:prefix_cache_hits{engine="0"} 4',
            'vllm:prefix_cache_hits_total{engine="0"} 4',  # both spellings of one sample count once
            'vllm:cache_config_info{block_size="32",engine="0",num_gpu_blocks="None"} 1.0',
            "",
        ]
    )
    m = parse_vllm_metrics(text, now=1.0)
    assert (m.running, m.waiting, m.kv_cache_usage) == (4, 0, 0.0)
    assert (m.prefix_cache_queries, m.prefix_cache_hits) == (10.0, 4.0)
    assert (m.num_gpu_blocks, m.block_size) == (None, 32)
    assert parse_vllm_metrics("", now=2.0) == ReplicaMetrics(scraped_at=2.0)
