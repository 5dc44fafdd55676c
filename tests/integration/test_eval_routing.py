"""`tessera eval routing --smoke` against the shared live server: both pools answer each item once, the answers are
cached, and every policy is scored offline on them."""

from __future__ import annotations

import argparse
import json

from demo.suite import routing_suite
from grounding.eval.cli import add_eval_parser
from grounding.eval.routing_cli import run_routing
from serving.prompt_router import load_router
from tests.admin import new_tenant


def _no_launch(models, progress, **kw):
    raise AssertionError("a --base-url run must not start a server")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_eval_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["eval", "routing", "--smoke", *argv])


def test_smoke_routing_eval_asks_both_pools_once_and_scores_every_policy(server, tmp_path):
    key = new_tenant(server, "routing", grounding_policy="flag", grounding_evidence="label_head")
    cache, out, png = tmp_path / "answers.jsonl", tmp_path / "routing.json", tmp_path / "curve.png"
    router = tmp_path / "models" / "router.json"
    common = ("--answers", str(cache), "--json", str(out))
    lines: list[str] = []
    found = run_routing(
        _args("--base-url", server.v1, "--api-key", key, *common, "--plot", str(png), "--router-out", str(router)),
        _no_launch,
        routing_suite(),
        lines.append,
    )
    assert found["items"] == {"train": 8, "dev": 4, "test": 4}  # two, one and one items of each of four slices
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len(rows) == 32  # every item once on each pool
    assert {(r["split"], r["model"]) for r in rows} == {
        (s, m) for s in ("train", "dev", "test") for m in ("small", "large")
    }
    # The shared server's large pool takes no audio: those requests are refused, and recorded as wrong answers.
    failed = [r for r in rows if r["error"]]
    assert failed
    assert all(r["model"] == "large" and "audio" in r["mix"] for r in failed)
    assert found["failed_requests"] == len(failed)
    answered = [r for r in rows if not r["error"]]
    assert all(r["prompt_tokens"] for r in answered)
    assert any(r["evidence_scores"] for r in answered if r["model"] == "small" and r["mix"] != "text")
    assert {"always-weak", "always-strong", "heuristic", "oracle", "router", "best static split"} <= set(
        found["policies"]
    )
    assert found["policies"]["always-strong"]["overall"]["cost"] == 1.0
    assert found["chosen"] in found["policies"]
    assert set(found["targets"]) >= {"met", "apgr_at_least_0.65"}
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert json.loads(out.read_text())["chosen"] == found["chosen"]
    assert any(line.startswith("chosen on dev:") for line in lines)
    served = load_router(router)  # what the `router` policy serves: fitted on train, its threshold chosen on dev
    assert served.threshold == found["policies"]["router"]["settings"]["threshold"]
    assert served.fitted["train"] == 8

    # A second run finds every answer cached and asks nothing (no server listens at this address).
    again = run_routing(
        _args("--base-url", "http://127.0.0.1:9/v1", "--api-key", key, *common),
        _no_launch,
        routing_suite(),
        lines.append,
    )
    assert again["policies"] == found["policies"]
    assert len(cache.read_text().splitlines()) == 32
