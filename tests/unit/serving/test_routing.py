"""Routing by name, alias and `auto`; encoder results kept in the client's order."""

import asyncio
import random

import pytest

from serving.routing import ModalityUnsupported, PoolView, RouteRequest, UnknownModel, route

SMALL = PoolView("small", ["8b"], ["text", "image", "audio"], 0, lambda: 1.0)
LARGE = PoolView("large", ["70b"], ["text", "image"], 1, lambda: 1.0)


def _req(model="auto", modalities=("text",), tokens=50, text="hi"):
    return RouteRequest(model, set(modalities), tokens, text)


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
