"""Routing by name, alias and `auto`; encoder results kept in the client's order."""

import asyncio
import random

import pytest

from serving.routing import CASCADE_FIRST, ModalityUnsupported, PoolView, RouteRequest, UnknownModel, route

SMALL = PoolView("small", ["8b"], ["text", "image", "audio"], 0, lambda: 1.0)
LARGE = PoolView("large", ["70b"], ["text", "image"], 1, lambda: 1.0)


def _req(model="auto", modalities=("text",), tokens=50, text="hi", **policy):
    return RouteRequest(model, set(modalities), tokens, text, **policy)


def test_explicit_names_and_aliases():
    assert route(_req("70b"), [SMALL, LARGE])[0] == "large"
    assert route(_req("small"), [SMALL, LARGE]) == ("small", "explicit")
    with pytest.raises(UnknownModel):
        route(_req("gpt-9"), [SMALL, LARGE])


def test_explicit_pool_lacking_a_modality_is_refused():
    with pytest.raises(ModalityUnsupported) as exc:
        route(_req("large", ("text", "audio")), [SMALL, LARGE])
    assert exc.value.param == "model"


def test_auto_never_picks_a_pool_lacking_a_modality():
    name, _ = route(_req(modalities=("text", "audio"), tokens=5000, text="explain why"), [SMALL, LARGE])
    assert name == "small"


def test_auto_sends_simple_to_small_and_complex_or_long_to_large():
    assert route(_req(text="hello there"), [SMALL, LARGE])[0] == "small"
    assert route(_req(text="Explain step by step why the sky is blue"), [SMALL, LARGE])[0] == "large"
    assert route(_req(tokens=4000), [SMALL, LARGE])[0] == "large"


def test_auto_moves_away_from_a_saturated_pool():
    busy_large = PoolView("large", [], ["text", "image"], 1, lambda: 0.0)
    name, reason = route(_req(text="explain this"), [SMALL, busy_large])
    assert name == "small"
    assert "saturated" in reason


@pytest.mark.parametrize(("policy", "pool"), [("weakest", "small"), ("strongest", "large")])
def test_static_policies_take_their_end_of_the_able_pools(policy, pool):
    for text in ("hello", "Explain step by step why"):
        assert route(_req(text=text, policy=policy), [SMALL, LARGE]) == (pool, f"policy {policy}")
    # a pool that cannot take the request's media is never chosen
    assert route(_req(modalities=("text", "audio"), policy="strongest"), [SMALL, LARGE])[0] == "small"


def test_a_cascade_sends_media_to_the_weakest_pool_first_whatever_the_text():
    for text in ("hello", "Explain step by step why"):
        assert route(_req(modalities=("text", "image"), text=text, policy="cascade"), [SMALL, LARGE]) == (
            "small",
            CASCADE_FIRST,
        )


def test_a_cascade_places_text_and_streams_by_the_heuristic_and_honours_names():
    hard = "Explain step by step why the sky is blue"
    assert route(_req(text=hard, policy="cascade"), [SMALL, LARGE]) == (
        "large",
        "cascade: complex text, placed by the heuristic",
    )
    assert route(_req(text="hi", policy="cascade"), [SMALL, LARGE]) == (
        "small",
        "cascade: simple text, placed by the heuristic",
    )
    streamed = _req(modalities=("text", "image"), text=hard, policy="cascade", streamed=True)
    assert route(streamed, [SMALL, LARGE]) == ("large", "cascade: complex stream, placed by the heuristic")
    assert route(_req("large", modalities=("text", "image"), policy="cascade"), [SMALL, LARGE]) == ("large", "explicit")


def test_a_cascade_with_one_able_pool_answers_there_unchecked():
    name, reason = route(_req(modalities=("text", "audio"), policy="cascade"), [SMALL, LARGE])
    assert name == "small"
    assert not reason.startswith(CASCADE_FIRST)


def test_images_return_in_client_order_whatever_finishes_first():
    """The pipeline's image results follow the client's order even when the encoder answers out of order."""
    from serving.encoders.encoding import MediaEncoder
    from serving.encoders.families import ImageEmbedding
    from serving.media.images import LoadedImage
    from serving.pools import ModelPool
    from tests import media

    class ShuffledVision:
        identity = "shuffled"

        async def encode(self, image):
            seed = image.getpixel((0, 0))[0]
            await asyncio.sleep(random.random() / 50)  # finishes in a random order
            return ImageEmbedding(torch.full((4, 2), float(seed)), (1, 4, 4))

    import torch

    from serving.encoders.cache import CacheScope

    random.seed(3)
    images = [media.image(i, (32, 32)) for i in range(6)]
    loaded = [LoadedImage(img, f"{i:064d}") for i, img in enumerate(images)]
    pool = ModelPool("p", None, vision=ShuffledVision())  # type: ignore[arg-type]
    encoder = MediaEncoder(None, None)  # type: ignore[arg-type]
    embeds, cached = asyncio.run(encoder._encode_images(pool, loaded, CacheScope()))
    assert [float(e.embeds[0, 0]) for e in embeds] == [float(img.getpixel((0, 0))[0]) for img in images]
    assert cached == 0
