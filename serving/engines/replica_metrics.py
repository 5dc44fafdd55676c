"""What a vLLM replica's own `/metrics` says about its load: Prometheus' text exposition read into the few
figures the endpoint picker (serving.engines.fleet) weighs, summed over the replica's engines."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPE = re.compile(r"\\(.)")
# Sample name (with or without a counter's `_total`) -> field of ReplicaMetrics.
_SAMPLES = {
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:prefix_cache_queries": "prefix_cache_queries",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits": "prefix_cache_hits",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
}
_CACHE_INFO = "vllm:cache_config_info"


@dataclass
class ReplicaMetrics:
    """What one replica's own `/metrics` says, summed over its engines (data-parallel ranks)."""

    kv_cache_usage: float = 0.0  # vllm:kv_cache_usage_perc, 0..1, the mean over engines
    running: int = 0  # vllm:num_requests_running
    waiting: int = 0  # vllm:num_requests_waiting
    prefix_cache_queries: float = 0.0  # vllm:prefix_cache_queries_total, tokens, since the replica started
    prefix_cache_hits: float = 0.0  # vllm:prefix_cache_hits_total
    num_gpu_blocks: int | None = None  # label num_gpu_blocks of vllm:cache_config_info, summed over engines
    block_size: int | None = None  # label block_size of vllm:cache_config_info
    scraped_at: float = 0.0  # time.monotonic()

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries > 0 else None


def _parse_sample(line: str) -> tuple[str, dict[str, str], float] | None:
    """One sample line `name{label="value",...} value [timestamp]`; None for anything else."""
    line = line.strip()
    match = _NAME.match(line)
    if line.startswith("#") or match is None:
        return None
    name, pos, labels = match.group(0), match.end(), {}
    if line.startswith("{", pos):
        pos += 1
        while (label := _LABEL.match(line, pos)) is not None:
            labels[label.group(1)] = _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), label.group(2))
            pos = label.end()
        rest = line[pos:].lstrip()
        if not rest.startswith("}"):
            return None
        pos = len(line) - len(rest) + 1
    fields = line[pos:].split()
    try:
        value = float(fields[0]) if fields else math.nan
    except ValueError:
        return None
    return (name, labels, value) if math.isfinite(value) else None


def _int_label(labels: dict[str, str], key: str) -> int | None:
    try:
        return int(labels.get(key, ""))
    except ValueError:
        return None  # vLLM writes "None" before the KV cache is sized


def parse_vllm_metrics(text: str, now: float) -> ReplicaMetrics:
    """Reads vLLM's Prometheus text exposition. Unknown lines are ignored and missing metrics keep their
    defaults. Counts are summed over label sets (one per engine); KV usage, a fraction, is their mean."""
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    blocks: dict[frozenset[tuple[str, str]], tuple[int | None, int | None]] = {}
    for line in text.splitlines():
        sample = _parse_sample(line)
        if sample is None:
            continue
        name, labels, value = sample
        key = frozenset(labels.items())
        if name in _SAMPLES:
            samples[(_SAMPLES[name], key)] = value  # a duplicate line or both counter spellings count once
        elif name == _CACHE_INFO:
            blocks[key] = (_int_label(labels, "num_gpu_blocks"), _int_label(labels, "block_size"))
    totals: dict[str, list[float]] = {}
    for (attr, _), value in samples.items():
        totals.setdefault(attr, []).append(value)
    usage = totals.get("kv_cache_usage", [])
    gpu_blocks = [n for n, _ in blocks.values() if n is not None]
    sizes = [s for _, s in blocks.values() if s is not None]
    return ReplicaMetrics(
        kv_cache_usage=sum(usage) / len(usage) if usage else 0.0,
        running=round(sum(totals.get("running", []))),
        waiting=round(sum(totals.get("waiting", []))),
        prefix_cache_queries=sum(totals.get("prefix_cache_queries", [])),
        prefix_cache_hits=sum(totals.get("prefix_cache_hits", [])),
        num_gpu_blocks=sum(gpu_blocks) if gpu_blocks else None,
        block_size=max(sizes) if sizes else None,
        scraped_at=now,
    )
