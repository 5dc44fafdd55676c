"""The lease around a stub engine: every exit releases the KV ticket and the quota hold exactly once, aborts
an unfinished engine request, and publishes exactly one completion record; refusals hold nothing."""

import asyncio

import pytest

from api.chat.protocol import ChatMessage
from serving.encoders.pools import EncoderFailure
from serving.engines.base import GenerationParams
from serving.errors import EngineUnavailable, PermissionDenied
from serving.service import GenerationRequest
from tests import media
from tests.stubs import RecordingCaller, StubEngine, harness


class _BrokenVision:
    identity = "broken"

    async def encode(self, image):
        raise EncoderFailure("the vision encoder pool is overloaded", reason="overloaded")


def _request(*, image=False, allow_degraded=False, model="stub", max_tokens=16):
    content = [{"type": "text", "text": "look"}]
    if image:
        content.append({"type": "image_url", "image_url": {"url": media.png_data_url(1)}})
    msg = ChatMessage.model_validate({"role": "user", "content": content})
    return GenerationRequest(model, [msg], GenerationParams(max_tokens), allow_degraded=allow_degraded)


async def _settle(h):
    await asyncio.sleep(0)
    await h.tasks.drain()


def test_completed_stream_releases_once_and_publishes_one_record():
    h = harness()
    caller = RecordingCaller()

    async def run():
        completion = await h.service.start(_request(), caller)
        assert h.pool.admission.in_use > 0
        async with completion:
            texts = [d.text async for d in completion]
        await _settle(h)
        return texts

    texts = asyncio.run(run())
    assert "".join(texts) == "Hello!"
    assert h.pool.admission.in_use == 0
    assert caller.settled == [7]  # 4 prompt tokens + 3 output tokens
    assert h.engine.aborted == []  # it finished on its own
    assert [r.status for r in h.records] == ["completed"]
    record = h.records[0]
    assert (record.usage.prompt, record.usage.image, record.usage.text, record.usage.completion) == (4, 2, 2, 3)
    assert record.caller.tenant_id == "tenant-a"
    assert record.finish_reason == "length"
    assert h.engine.requests[0].cache_salt == "salt-a"
    assert caller.reserved[0][0] == "stub"
    assert caller.reserved[0][1] >= 16  # the estimate plus max_tokens


def test_the_reservation_is_the_worst_case_by_modality():
    """What the caller reserves (and prices, for a spending budget): the prompt by modality as estimated before
    decoding, and max_tokens for every choice."""
    h = harness()
    caller = RecordingCaller()

    async def run():
        completion = await h.service.start(_request(image=True, max_tokens=40), caller)
        async with completion:
            [d async for d in completion]
        await _settle(h)

    asyncio.run(run())
    (worst,) = caller.worst
    assert worst.completion == 40
    assert worst.image > 0
    assert worst.audio == 0
    assert worst.text > 0
    assert worst.prompt == worst.text + worst.image
    assert caller.reserved == [("stub", worst.prompt + 40)]


@pytest.mark.parametrize(("with_tools", "salt"), [(False, "everyone"), (True, "salt-a")])
def test_a_pinned_medium_shares_its_prefix_only_without_tools(with_tools, salt):
    from serving.media.images import ImageLoader
    from serving.tools import REQUIRED, ToolPlan, ToolSpec

    url = media.png_data_url(1)
    loader = ImageLoader(max_pixels=10**7, fetcher=None)  # type: ignore[arg-type]
    pinned = loader.load_bytes(media.png_bytes(media.image(1)), param="p").content_hash
    h = harness(pinned_media={pinned}, shared_cache_salt="everyone")
    msg = ChatMessage.model_validate({"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]})
    tools = ToolPlan((ToolSpec("acme_lookup_customer"),), REQUIRED) if with_tools else None
    request = GenerationRequest("stub", [msg], GenerationParams(16), tools=tools)

    async def run():
        completion = await h.service.start(request, RecordingCaller())
        async with completion:
            [d async for d in completion]
        await _settle(h)

    asyncio.run(run())
    assert h.engine.requests[0].cache_salt == salt


@pytest.mark.parametrize("how", ["close", "cancel", "exception"])
def test_every_early_exit_aborts_the_engine_and_releases_once(how):
    h = harness(StubEngine(hang_at=1))
    caller = RecordingCaller()

    async def consume(completion):
        async with completion:
            async for _ in completion:
                if how == "exception":
                    raise RuntimeError("the renderer failed")

    async def run():
        completion = await h.service.start(_request(), caller)
        if how == "close":
            await anext(completion)
            await completion.aclose()
            await completion.aclose()  # idempotent
        elif how == "cancel":
            task = asyncio.create_task(consume(completion))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            with pytest.raises(RuntimeError):
                await consume(completion)
        await _settle(h)
        return completion

    completion = asyncio.run(run())
    assert h.engine.aborted == [completion.request_id]
    assert h.pool.admission.in_use == 0
    assert caller.settled == [5]  # the 4-token prompt and the one token delivered
    assert [r.status for r in h.records] == ["failed" if how == "exception" else "cancelled"]


def test_engine_death_mid_stream_fails_the_record():
    h = harness(StubEngine(fail_at=2))
    caller = RecordingCaller()

    async def drain(completion):
        async with completion:
            async for _ in completion:
                pass

    async def run():
        completion = await h.service.start(_request(), caller)
        with pytest.raises(EngineUnavailable):
            await drain(completion)
        await _settle(h)

    asyncio.run(run())
    assert [r.status for r in h.records] == ["failed"]
    assert h.records[0].usage.completion == 2
    assert caller.settled == [6]
    assert h.pool.admission.in_use == 0


def test_refusals_hold_nothing_and_publish_nothing():
    h = harness()
    caller = RecordingCaller(allowed={"other"})
    with pytest.raises(PermissionDenied):
        asyncio.run(h.service.start(_request(image=True), caller))
    assert caller.reserved == []  # refused before any media was fetched or tokens reserved
    assert h.records == []
    h2 = harness(vision=_BrokenVision())
    caller2 = RecordingCaller()

    async def run():
        with pytest.raises(EncoderFailure) as exc:
            await h2.service.start(_request(image=True), caller2)
        await _settle(h2)
        return exc.value

    error = asyncio.run(run())
    assert error.code == "encoder_unavailable"
    assert h2.pool.admission.in_use == 0  # the ticket came back
    assert caller2.settled == [0]  # the reservation came back, with nothing used
    assert h2.records == []


def test_degraded_request_drops_the_media_and_says_so():
    h = harness(vision=_BrokenVision())
    caller = RecordingCaller()

    async def run():
        completion = await h.service.start(_request(image=True, allow_degraded=True), caller)
        await completion.aclose()
        await _settle(h)
        return completion

    completion = asyncio.run(run())
    request = h.engine.requests[0] if h.engine.requests else completion.submission.engine_request
    assert completion.submission.degraded == ("image",)
    assert request.images == []
    assert request.image_embeds is None
    assert '"image"' not in request.prompt
    assert completion.submission.modalities == frozenset({"text"})
    assert h.pool.admission.in_use == 0


def test_a_caller_at_its_limit_is_refused_before_any_media_is_fetched():
    from serving.errors import RateLimited

    class Full(RecordingCaller):
        async def precheck(self) -> None:
            raise RateLimited("no slot left", retry_after_s=1.0)

    h = harness()
    probed: list[object] = []
    probe = h.service.pipeline.probe

    async def counting_probe(plan):
        probed.append(plan)
        return await probe(plan)

    h.service.pipeline.probe = counting_probe  # type: ignore[method-assign]
    caller = Full()
    with pytest.raises(RateLimited):
        asyncio.run(h.service.start(_request(image=True), caller))
    assert probed == []
    assert caller.reserved == []
    ok = RecordingCaller()
    asyncio.run(_drain_once(h, ok))
    assert ok.prechecked == 1
    assert len(probed) == 1


async def _drain_once(h, caller):
    completion = await h.service.start(_request(image=True), caller)
    async with completion:
        async for _ in completion:
            pass
