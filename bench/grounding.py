"""`tessera bench grounding`: what the grounding guardrail adds to an answer about an image under `flag`, per
evidence, measured side by side on one server: no guardrail (`off`), the label head, the judge, and both.

Each round sends one streamed request per side, in an order that rotates round by round, each with a scene of
its own (so no side finds another's image in the embedding cache), and times its first token and its end: under
`flag` the response ends only once the verdict is in, so the time after the last token is what the evidence
costs. The report gives per side the median of the rounds with its spread, the median added over `off` (after the
last token, to the first token and to the end), and the judge's added time after the last token over the label
head's.
"""

from __future__ import annotations

import asyncio
import base64
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import BenchFailure, Progress, check_report, metric, spread, stamp, stream_chat, write_report
from bench.server import DEMO_TENANT, LiveServer, live_server
from config.settings import Settings

SIDES = ("off", "label_head", "judge", "both")
MODEL = "large"
QUESTION = "Describe the image."
SCENE_SEED = 4242  # the bench's own scenes: no golden set's seed


def _quota(side: str) -> dict[str, Any]:
    if side == "off":
        return {"grounding_policy": "off"}
    return {"grounding_policy": "flag", "grounding_evidence": side}


def _body(png: bytes, max_tokens: int) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": QUESTION}]
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }


async def _set_policy(http: httpx.AsyncClient, server: LiveServer, tenant_id: str, side: str) -> None:
    put = await http.put(
        f"{server.base}/admin/tenants/{tenant_id}/quota", json=_quota(side), headers=server.admin_headers
    )
    if put.status_code != 200:
        raise BenchFailure(f"setting the guardrail to {side} answered {put.status_code}: {put.text[:300]}")


async def _tenant_id(http: httpx.AsyncClient, server: LiveServer) -> str:
    listed = await http.get(f"{server.base}/admin/tenants", headers=server.admin_headers)
    found = [t for t in listed.json()["data"] if t["name"] == DEMO_TENANT]
    if not found:
        raise BenchFailure(f"the bench server has no tenant '{DEMO_TENANT}'")
    return str(found[0]["id"])


def _side_summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "ttft_s": spread([r["ttft_s"] for r in runs], "runs"),
        "total_s": spread([r["total_s"] for r in runs], "runs"),
        "after_last_token_s": spread([r["total_s"] - r["last_s"] for r in runs], "runs"),
    }


async def _measure(server: LiveServer, rounds: int, max_tokens: int, progress: Progress) -> dict[str, list[dict]]:
    from demo.world import png_bytes, sample_scene

    rng = np.random.default_rng(SCENE_SEED)
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    async with httpx.AsyncClient(timeout=600) as http:
        tenant = await _tenant_id(http, server)
        for warm in SIDES:  # the first request of each kind pays one-time costs (grammar, scorer models)
            await _set_policy(http, server, tenant, warm)
            await stream_chat(http, server.base, server.key, _body(png_bytes(sample_scene(rng)), max_tokens))
        for r in range(rounds):
            order = SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]
            for side in order:
                await _set_policy(http, server, tenant, side)
                judged_before = metric(server.base, "tessera_grounding_judge_seconds_count")
                run = await stream_chat(http, server.base, server.key, _body(png_bytes(sample_scene(rng)), max_tokens))
                judged = metric(server.base, "tessera_grounding_judge_seconds_count") - judged_before
                if side in ("judge", "both") and judged < 1:
                    raise BenchFailure(f"round {r + 1}: the {side} side's answer was not judged")
                runs[side].append({"ttft_s": run["ttft_s"], "total_s": run["total_s"], "last_s": run["last_s"]})
            line = ", ".join(f"{s} {runs[s][-1]['total_s'] * 1000:.0f} ms" for s in SIDES)
            progress(f"  round {r + 1}/{rounds}: {line}")
    return runs


def run_grounding_bench(
    out: Path, settings: Settings, smoke: bool = False, rounds: int | None = None, progress: Progress = print
) -> dict[str, Any]:
    from demo.checkpoints import build_demo_checkpoints

    rounds = rounds or (2 if smoke else 15)
    max_tokens = 24 if smoke else 64
    build_demo_checkpoints(settings.demo_dir(), [MODEL], progress=progress)
    progress(f"starting the live server (pool {MODEL}); {rounds} rounds of {', '.join(SIDES)}")
    started = time.perf_counter()
    with live_server(settings.demo_dir(), [{"name": MODEL}], progress) as server:
        runs = asyncio.run(_measure(server, rounds, max_tokens, progress))
    sides = {side: _side_summary(runs[side]) for side in SIDES}

    def added(side: str, key: str) -> float:
        def value(r: dict[str, float]) -> float:
            return r["total_s"] - r["last_s"] if key == "after" else r[key]

        return round(statistics.median(map(value, runs[side])) - statistics.median(map(value, runs["off"])), 3)

    report: dict[str, Any] = {
        **stamp(smoke),
        "model": MODEL,
        "rounds": rounds,
        "max_tokens": max_tokens,
        "sides": sides,
        # after the last token is what the verdict costs; the whole answer also varies with each scene's answer
        "added_p50_s": {
            s: {"after_last_token": added(s, "after"), "total": added(s, "total_s"), "ttft": added(s, "ttft_s")}
            for s in SIDES[1:]
        },
        "bench_s": round(time.perf_counter() - started, 1),
    }
    label = report["added_p50_s"]["label_head"]["after_last_token"]
    judge = report["added_p50_s"]["judge"]["after_last_token"]
    report["judge_minus_label_head_p50_s"] = round(judge - label, 3)
    check_report(report, positive=[f"sides.{s}.total_s.median" for s in SIDES])
    write_report(out, report)
    for side in SIDES[1:]:
        a = report["added_p50_s"][side]
        progress(
            f"  {side:10s} adds {a['after_last_token'] * 1000:+.0f} ms at p50 after the last token "
            f"({a['ttft'] * 1000:+.0f} ms to the first, {a['total'] * 1000:+.0f} ms to the whole answer)"
        )
    progress(f"wrote {out}")
    return report
