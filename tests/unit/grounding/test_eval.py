"""The grounding eval's arithmetic, request building, report and command line, against a stub OpenAI client."""

import argparse
import base64
import io
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import openai
import pytest
import soundfile as sf
from PIL import Image

from demo.golden import GOLDEN_DIR, read_items
from demo.suite import golden_suite
from grounding.eval import harness
from grounding.eval.cli import add_eval_parser, run_eval
from grounding.eval.harness import request_messages, run_items
from grounding.eval.metrics import EvalFailure, ItemResult, auroc, check_well_formed, gate, metrics, summarise
from grounding.eval.report import render_html
from grounding.eval.verdicts import guardrail_details, guardrail_flag

SUITE = golden_suite()


def result(kind="count", mix="image", correct=True, objects=(), hallucinated=(), yes_no=None, expected=None,
           flagged=None, error=None) -> ItemResult:  # fmt: skip
    return ItemResult(
        id="x", model="m", mix=mix, target="image", kind=kind, question="q", reference="r", answer="a",
        correct=correct, problems=[] if correct else ["wrong"], objects=list(objects),
        hallucinated=list(hallucinated), yes_no=yes_no, expected=expected, flagged=flagged, latency_s=0.1, error=error,
    )  # fmt: skip


RESULTS = [
    result(correct=True, objects=["circle", "star"]),
    result(correct=False, objects=["circle", "woman", "dress"], hallucinated=["woman", "dress"]),
    result(kind="exists", correct=True, yes_no="yes", expected="yes"),
    result(kind="exists", correct=False, yes_no="yes", expected="no"),
    result(kind="exists", mix="audio", correct=True, yes_no="no", expected="no", objects=["cup"]),
]


def test_metric_arithmetic():
    m = metrics(RESULTS)
    assert m["items"] == 5
    assert m["errors"] == 0
    assert m["accuracy"] == 0.6
    assert m["objects_mentioned"] == 6
    assert m["hallucination_rate"] == round(2 / 6, 4)
    assert m["hallucinating_answers"] == 0.2
    assert m["pope"] == {"items": 3, "accuracy": 0.6667, "yes_precision": 0.5, "yes_recall": 1.0, "yes_ratio": 0.6667}
    assert m["guardrail"] is None, "no verdicts in the responses: no guardrail numbers"


def test_guardrail_precision_and_recall():
    flags = [True, True, False, True, False]  # flags items 0 (right), 1 (wrong), 3 (wrong); misses none
    judged = [ItemResult(**{**r.__dict__, "flagged": f}) for r, f in zip(RESULTS, flags, strict=True)]
    g = metrics(judged)["guardrail"]
    assert g == {"judged": 5, "precision": 0.6667, "recall": 1.0, "false_flag_rate": 0.3333}


def test_guardrail_figures_at_other_thresholds_come_from_the_scores():
    scores = [0.8, 0.5, 1.0, 0.95, 1.0]  # right, wrong, right, wrong, right; flagged as a 0.9 threshold would
    judged = [
        ItemResult(**{**r.__dict__, "flagged": sc < 0.9, "score": sc}) for r, sc in zip(RESULTS, scores, strict=True)
    ]
    g = metrics(judged)["guardrail"]
    assert g["by_threshold"]["0.9"] == {"precision": 0.5, "recall": 0.5, "false_flag_rate": 0.3333}
    assert g["by_threshold"]["1.0"] == {"precision": 0.6667, "recall": 1.0, "false_flag_rate": 0.3333}
    assert g["by_threshold"]["0.5"] == {"precision": None, "recall": 0.0, "false_flag_rate": 0.0}
    assert [g[k] for k in ("precision", "recall")] == [0.5, 0.5]  # as the server flagged
    unscored = [ItemResult(**{**r.__dict__, "flagged": False}) for r in RESULTS]
    assert "by_threshold" not in metrics(unscored)["guardrail"], "no scores: no figures at other thresholds"


def test_auroc_says_how_well_each_evidence_ranks_wrong_answers_below_right_ones():
    scores = [0.8, 0.5, 1.0, 0.8, 1.0]  # right, wrong, right, wrong, right
    heads = [0.9, 0.1, 0.05, None, 0.95]  # the label head gave the fourth (wrong) answer no score
    judged = [
        ItemResult(**{**r.__dict__, "flagged": sc < 0.9, "score": sc, "evidence_scores": {"label_head": h}})
        for r, sc, h in zip(RESULTS, scores, heads, strict=True)
    ]
    g = metrics(judged)["guardrail"]
    # both: the wrong 0.5 is below all three right ones; the wrong 0.8 ties the right 0.8 and is below two 1.0s
    assert g["auroc"]["both"] == round((3 + 2.5) / 6, 4)
    assert g["auroc"]["label_head"] == round(2 / 3, 4)  # 0.1 is below 0.9 and 0.95, above 0.05
    assert g["auroc"]["judge"] is None  # no judge scores at all
    assert auroc([(0.3, True), (0.3, False)]) == 0.5
    assert auroc([(0.9, True), (0.9, True)]) is None  # no wrong answer to rank


def test_slices_and_gate():
    summary = summarise(RESULTS)
    assert set(summary["by_mix"]) == {"image", "audio"}
    assert set(summary["by_kind"]) == {"count", "exists"}
    assert summary["by_mix"]["audio"]["accuracy"] == 1.0
    assert summary["by_kind"]["count"]["hallucination_rate"] == 0.4
    assert gate(summary) == [
        "accuracy 0.6 < 0.92",
        "hallucination rate 0.3333 > 0.03",
        "accuracy 0.5 < 0.92 on the image slice",
        "hallucination rate 0.4 > 0.03 on the image slice",
    ]
    clean = summarise([result(objects=["circle"])] * 10)
    assert gate(clean) == []
    check_well_formed(summary, expected_items=5)
    with pytest.raises(EvalFailure, match="4 of 5 items"):
        check_well_formed(summarise(RESULTS[:4]), expected_items=5)
    with pytest.raises(EvalFailure, match="1 requests failed"):
        check_well_formed(summarise([*RESULTS[:4], result(correct=False, error="boom")]), expected_items=5)


@pytest.mark.parametrize(
    ("completion", "flag"),
    [
        ({"choices": [{"message": {"content": "x"}}]}, None),
        ({"choices": [{"message": {"content": "x"}}], "grounding": {"flagged": True}}, True),
        ({"choices": [{"message": {"content": "x"}, "grounding": {"passed": True}}]}, False),
        ({"choices": [{"message": {"content": None, "refusal": "Not supported by the media."}}]}, True),
    ],
)
def test_guardrail_verdict_is_read_not_invented(completion, flag):
    assert guardrail_flag(completion) is flag


def test_guardrail_details_are_read_where_given():
    verdict = {"flagged": True, "score": 0.5, "unsupported_claims": ["a square"]}
    assert guardrail_details({"choices": [{"message": {}, "grounding": verdict}]}) == (["a square"], 0.5)
    assert guardrail_details({"choices": [{"message": {}}], "grounding": {"flagged": True}}) == (None, None)


def test_request_carries_media_in_order_then_the_question():
    item = next(i for i in read_items(GOLDEN_DIR / "smoke.jsonl") if i.mix == "image+audio")
    parts = request_messages(item, SUITE)[0]["content"]
    kinds = [p["type"] for p in parts]
    assert kinds[:2] == [{"image": "image_url", "audio": "input_audio"}[m] for m in item.media_order]
    assert parts[-1] == {"type": "text", "text": item.question}
    image_part = next(p for p in parts if p["type"] == "image_url")
    prefix, data = image_part["image_url"]["url"].split(",", 1)
    assert prefix == "data:image/png;base64"
    assert Image.open(io.BytesIO(base64.b64decode(data))).size == (item.scene.width, item.scene.height)
    audio_part = next(p for p in parts if p["type"] == "input_audio")
    samples, rate = sf.read(io.BytesIO(base64.b64decode(audio_part["input_audio"]["data"])), dtype="float32")
    assert rate == 16_000
    assert samples.size == item.audio().size
    assert np.abs(samples - item.audio()).max() < 1e-3


@dataclass
class StubServer:
    base: str = "http://stub"
    key: str = "sk-stub"


class StubClient:
    """Answers each question with a fixed text per item (the reference by default), like the SDK's client."""

    def __init__(self, answers: dict[str, str], fail: bool = False) -> None:
        self.answers, self.fail, self.calls = answers, fail, []
        self.chat = self
        self.completions = self

    def create(self, **body: Any) -> Any:
        self.calls.append(body)
        if self.fail:
            raise openai.APIConnectionError(request=None)  # type: ignore[arg-type]
        question = body["messages"][0]["content"][-1]["text"]
        choice = (body.get("extra_body") or {}).get("structured_outputs", {}).get("choice")
        content = choice[0] if choice else self.answers.get(question, "A green triangle.")
        return openai.types.chat.ChatCompletion.model_validate(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                ],
            }
        )


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_eval_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["eval", "grounding", *argv])


def test_run_items_stops_at_the_deadline():
    items = read_items(GOLDEN_DIR / "smoke.jsonl")[:3]
    client = StubClient({i.question: i.answer for i in items})
    done = run_items(client, SUITE, "m", items, max_tokens=8, deadline=time.monotonic() - 1, progress=lambda _: None)
    assert done == []
    assert client.calls == []
    done = run_items(client, SUITE, "m", items, max_tokens=8, deadline=time.monotonic() + 60, progress=lambda _: None)
    assert [r.correct for r in done] == [True, True, True]
    assert client.calls[0]["temperature"] == 0
    assert client.calls[0]["max_tokens"] == 8


def _launcher(calls: list[list[str]]):
    @contextmanager
    def launch(models, progress, guardrail="flag", evidence="both", judge_thresholds=(None, None)):
        calls.append(models)
        yield StubServer()

    return launch


def test_smoke_run_writes_json_and_html_and_checks_form(tmp_path, monkeypatch):
    items = read_items(GOLDEN_DIR / "smoke.jsonl")
    answers = {i.question: "I see a <woman> in a dress." for i in items}
    monkeypatch.setattr(harness, "_client", lambda base, key: StubClient(answers))
    launched: list[list[str]] = []
    lines: list[str] = []
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    run_eval(_args("--smoke", "--json", str(out), "--report", str(page)), _launcher(launched), SUITE, lines.append)
    assert launched == [["small"]]
    report = json.loads(out.read_text())
    overall = report["models"]["small"]["summary"]["overall"]
    assert overall["items"] == len(items)
    assert overall["accuracy"] == 0.0
    assert overall["hallucination_rate"] == 1.0
    assert overall["guardrail"] is None
    assert report["smoke"] is True
    assert report["gate"]["passed"] is False
    html = page.read_text()
    assert "By modality mix" in html
    assert "image+audio" in html
    assert "&lt;woman&gt;" in html
    assert "<woman>" not in html
    assert any("smoke: every step ran" in line for line in lines)


def test_a_run_below_the_gate_exits_non_zero_and_one_above_passes(tmp_path, monkeypatch):
    items = read_items(GOLDEN_DIR / "smoke.jsonl")
    right = {i.question: i.answer for i in items}
    monkeypatch.setattr(harness, "_client", lambda base, key: StubClient(right))
    run_eval(
        _args("--base-url", "http://stub/v1", "--set", str(GOLDEN_DIR / "smoke.jsonl")), _launcher([]), SUITE, print
    )
    monkeypatch.setattr(harness, "_client", lambda base, key: StubClient({}))
    with pytest.raises(SystemExit, match="below the gate"):
        run_eval(_args("--base-url", "http://stub/v1", "--limit", "3"), _launcher([]), SUITE, lambda _: None)


def test_smoke_fails_when_a_request_fails(monkeypatch):
    monkeypatch.setattr(harness, "_client", lambda base, key: StubClient({}, fail=True))
    with pytest.raises(SystemExit, match="requests failed"):
        run_eval(_args("--smoke", "--limit", "2", "--base-url", "http://stub/v1"), _launcher([]), SUITE, lambda _: None)


def test_html_shows_null_metrics_as_dashes():
    report = {
        "started_at": "t",
        "max_tokens": 8,
        "gate": {"model": "m", "accuracy_min": 0.9, "hallucination_max": 0.04, "passed": True, "failures": []},
        "models": {"m": {"seconds": 1.0, "summary": summarise(RESULTS[:2]), "results": []}},
    }
    html = render_html(report)
    assert "60.0%" not in html
    assert "50.0%" in html
    assert "—" in html


def test_items_in_flight_together_come_back_in_order():
    items = read_items(GOLDEN_DIR / "smoke.jsonl")
    client = StubClient({i.question: i.answer for i in items})
    lines: list[str] = []
    done = run_items(
        client, SUITE, "m", items, max_tokens=8, deadline=time.monotonic() + 60, progress=lines.append, concurrency=4
    )
    assert [r.id for r in done] == [i.id for i in items]
    assert all(r.correct for r in done)
    assert len(client.calls) == len(items)
    assert [line.split("]")[0].split("[")[1] for line in lines] == [f"{n}/{len(items)}" for n in range(1, 15)]
