"""The demo's golden sets as the grounding eval's suite (the items, their media drawn by the world, the judge), and
the routing splits as the routing eval's."""

from __future__ import annotations

import numpy as np

from demo.answers import check_answer
from demo.golden import GOLDEN_DIR, HELDOUT_SETS, GoldenItem, read_items
from demo.routing_set import check_routing_answer, split_items
from demo.speech import wav_bytes
from demo.world import png_bytes
from demo.wrong_answers import one_fact_changed
from grounding.eval import EvalSuite
from grounding.eval.routing import RoutingSuite


def golden_suite() -> EvalSuite[GoldenItem]:
    def image_png(item: GoldenItem) -> bytes | None:
        return png_bytes(item.scene) if item.scene else None

    def audio_wav(item: GoldenItem) -> bytes:
        return wav_bytes(item.audio())

    def wrong_answer(item: GoldenItem) -> str:
        # seeded by the item, so every run forces the same wrong answers
        return one_fact_changed(item, np.random.default_rng(item.seed))

    return EvalSuite(
        sets=GOLDEN_DIR,
        read=read_items,
        image_png=image_png,
        audio_wav=audio_wav,
        judge=check_answer,
        wrong_answer=wrong_answer,
        heldout=frozenset(HELDOUT_SETS),
    )


def routing_suite() -> RoutingSuite[GoldenItem]:
    """The routing eval's splits (demo.routing_set): media drawn as the golden sets' are, text items judged by
    their accepted words."""
    media = golden_suite()
    judged = EvalSuite(
        sets=media.sets,
        read=media.read,
        image_png=media.image_png,
        audio_wav=media.audio_wav,
        judge=check_routing_answer,
        heldout=media.heldout,
    )
    return RoutingSuite(items=split_items, media=judged)
