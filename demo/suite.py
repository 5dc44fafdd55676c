"""The demo's golden sets as the grounding eval's suite: the items, their media drawn by the world, the judge."""

from __future__ import annotations

from demo.answers import check_answer
from demo.golden import GOLDEN_DIR, GoldenItem, read_items
from demo.speech import wav_bytes
from demo.world import png_bytes
from grounding.eval import EvalSuite


def golden_suite() -> EvalSuite[GoldenItem]:
    def image_png(item: GoldenItem) -> bytes | None:
        return png_bytes(item.scene) if item.scene else None

    def audio_wav(item: GoldenItem) -> bytes:
        return wav_bytes(item.audio())

    return EvalSuite(sets=GOLDEN_DIR, read=read_items, image_png=image_png, audio_wav=audio_wav, judge=check_answer)
