"""The SSE path with a stub engine: chunk order, usage chunk, and errors after the stream started."""

import asyncio
import json

import pytest

from api.chat_serving import ChatService, Generation
from api.metrics import ServerMetrics
from api.parsing import parse_chat_request
from api.settings import Settings
from api.streaming import stream
from serving.admission import Ticket
from serving.engine import EngineCapacity, EngineDelta, EngineRequest, EngineStats, GenerationParams
from serving.errors import EngineUnavailable
from serving.pipeline import Pipeline, PreparedRequest
from serving.pools import ModelPool, PoolRegistry


class StubEngine:
    name = "stub"
    capacity = EngineCapacity(num_blocks=10, block_size=16, max_model_len=512)

    def __init__(self, deltas, fail_after=None):
        self.stats = EngineStats()
        self._deltas = deltas
        self._fail_after = fail_after
        self.aborted: list[str] = []

    async def generate(self, request):
        for i, delta in enumerate(self._deltas):
            if self._fail_after is not None and i == self._fail_after:
                raise EngineUnavailable("engine died mid-stream")
            yield delta

    async def abort(self, request_id):
        self.aborted.append(request_id)

    def is_healthy(self):
        return True

    async def has_work(self, wait_s=5.0):
        return False

    def num_unfinished(self):
        return 0

    def tokenizer(self):
        class _Tok:
            def apply_chat_template(self, messages, **_):
                return json.dumps(messages)

        return _Tok()

    def shutdown(self):
        pass


class NullUsageLog:
    def __init__(self):
        self.records = []

    def spawn(self, coro):
        asyncio.get_running_loop().create_task(coro)

    def record(self, *args, **kwargs):
        self.records.append(args)


PROMPT = [5, 99, 99, 6]  # 99 stands for an image placeholder


def _deltas():
    return [
        EngineDelta("Hel", [1], PROMPT, 0, None),
        EngineDelta("lo", [2], PROMPT, 0, None),
        EngineDelta("!", [3], PROMPT, 0, "length"),
    ]


def _service(engine):
    pool = ModelPool("stub", engine, modalities=["text", "image"], media_token_ids={"image": 99})
    log = NullUsageLog()
    pipeline = Pipeline(PoolRegistry([pool]), None, None, max_images=8)
    return ChatService(Settings(), pipeline, ServerMetrics(), log), log


async def _collect(engine, **body):
    chat, log = _service(engine)
    req = parse_chat_request(
        json.dumps({"model": "stub", "messages": [{"role": "user", "content": "hi"}], "stream": True, **body}).encode()
    )
    pool = chat._pipeline._pools.pools[0]
    request = EngineRequest("req-1", "p", [], [], GenerationParams(8))
    gen = Generation("req-1", 0, PreparedRequest(pool, request, Ticket(0), {"text"}, "explicit", 0, []), 0.0)
    response = await stream(chat, req, gen)
    events = [e async for e in response.iterator]
    await asyncio.sleep(0)
    return events, log, gen


def _payloads(events):
    return [e.removeprefix("data: ").strip() for e in events]


def test_stream_chunks_and_usage():
    events, log, _ = asyncio.run(_collect(StubEngine(_deltas()), stream_options={"include_usage": True}))
    payloads = _payloads(events)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks[1:-1]) == "Hello!"
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == []
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens_details"] == {
        "cached_tokens": 0,
        "text_tokens": 2,
        "image_tokens": 2,
        "audio_tokens": 0,
        "cached_image_tokens": 0,
        "cached_audio_tokens": 0,
    }
    assert usage["completion_tokens"] == 3
    assert log.records[0][4] == "completed"


def test_error_after_start_becomes_an_event_then_done():
    engine = StubEngine(_deltas(), fail_after=2)
    events, log, _ = asyncio.run(_collect(engine))
    payloads = _payloads(events)
    assert payloads[-1] == "[DONE]"
    error = json.loads(payloads[-2])
    assert error["error"]["code"] == "engine_unavailable"
    assert error["error"]["type"] == "server_error"
    assert log.records[0][4] == "failed"
    assert engine.aborted == ["req-1"]


def test_error_before_first_token_is_raised_for_an_http_status():
    engine = StubEngine(_deltas(), fail_after=0)
    with pytest.raises(EngineUnavailable):
        asyncio.run(_collect(engine))
