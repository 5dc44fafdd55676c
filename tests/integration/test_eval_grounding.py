"""`tessera eval grounding --smoke` against the shared live server: every golden item through the real path."""

from __future__ import annotations

import argparse
import json

from demo.golden import GOLDEN_DIR, read_items
from demo.suite import golden_suite
from grounding.eval.cli import add_eval_parser, run_eval
from tests.conftest import API_KEY


def _no_launch(models, progress):
    raise AssertionError("a --base-url run must not start a server")


def test_smoke_eval_runs_every_item_and_writes_well_formed_reports(server, tmp_path):
    parser = argparse.ArgumentParser()
    add_eval_parser(parser.add_subparsers(dest="command"))
    out, page = tmp_path / "eval.json", tmp_path / "eval.html"
    target = ["--model", "small", "--base-url", server.v1, "--api-key", API_KEY]
    args = parser.parse_args(["eval", "grounding", "--smoke", *target, "--json", str(out), "--report", str(page)])
    lines: list[str] = []
    run_eval(
        args, _no_launch, golden_suite(), lines.append
    )  # raises SystemExit on a failed request or a malformed metric

    items = read_items(GOLDEN_DIR / "smoke.jsonl")
    run = json.loads(out.read_text())["models"]["small"]
    assert [r["id"] for r in run["results"]] == [i.id for i in items]
    assert all(r["error"] is None for r in run["results"])
    assert sum(bool(r["answer"]) for r in run["results"]) >= len(items) - 1, "the engine answered (random text)"
    summary = run["summary"]
    assert set(summary["by_mix"]) == {"image", "audio", "image+audio"}
    assert sum(s["items"] for s in summary["by_mix"].values()) == len(items)
    assert 0.0 <= summary["overall"]["accuracy"] <= 1.0
    assert "By question kind" in page.read_text()
    assert any(line.startswith("  small [14/14]") for line in lines)
    made = run["forced"]["results"]  # right and one-fact-wrong answers of 3 items, forced by structured outputs
    assert [r["forced"] for r in made] == ["right"] * 3 + ["wrong"] * 3
    assert all(r["error"] is None for r in made)
    assert [r["answer"] for r in made[:3]] == [r["reference"] for r in made[:3]], "the model gave the forced answer"
    assert not any(r["correct"] for r in made[3:]), "the forced wrong answers are wrong"
    assert run["forced"]["figures"]["sent"] == 6
