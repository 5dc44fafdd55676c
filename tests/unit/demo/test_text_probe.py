"""The end-of-run text probe: everyday questions no run trains on, and whether France's capital is still Paris."""

from __future__ import annotations

from demo.training import output
from demo.training.text_keep import MORE_PROMPTS, TEXT_PROMPTS


def test_the_probe_asks_untrained_questions_without_media_and_reads_paris(monkeypatch):
    asked = []

    def fake_answer(trainer, item, max_new_tokens=48):
        asked.append(item)
        return " The capital of France is Paris. " if "France" in item.question else "Green."

    monkeypatch.setattr(output, "answer", fake_answer)
    found = output.text_probe(trainer=None)
    assert found["paris"] is True
    assert found["answers"]["What colour is grass?"] == "Green."
    assert all(i.scene is None and i.clip is None and i.mix == "text" for i in asked)
    assert not set(output.TEXT_PROBES) & {*TEXT_PROMPTS, *MORE_PROMPTS}  # never trained on

    monkeypatch.setattr(output, "answer", lambda trainer, item, max_new_tokens=48: "The capital of Germany is Berlin.")
    assert output.text_probe(trainer=None)["paris"] is False
