"""The wire structs dump to JSON that OpenAI's published schemas accept, with OpenAI's nulls and omissions."""

from __future__ import annotations

from api.chat.protocol import ChatCompletion, ChatCompletionChunk, Choice, ChunkChoice, Delta, ResponseMessage, Usage
from tests.openai_schema import CHUNK, COMPLETION, assert_valid


def _chunk(delta: Delta, **kw) -> dict:
    return ChatCompletionChunk(
        id="chatcmpl-1", created=1, model="small", choices=[ChunkChoice(delta=delta, **kw)]
    ).model_dump(mode="json")


def test_a_completion_sends_refusal_null_and_leaves_out_what_is_unset():
    body = ChatCompletion(
        id="chatcmpl-1",
        created=1,
        model="small",
        choices=[Choice(message=ResponseMessage(content="hi"), finish_reason="stop")],
        usage=Usage(prompt_tokens=3, completion_tokens=1, total_tokens=4),
    ).model_dump(mode="json")
    assert_valid(body, COMPLETION)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi", "refusal": None}
    assert body["choices"][0]["logprobs"] is None
    assert "token_ids" not in body["choices"][0]
    assert not {"system_fingerprint", "prompt_token_ids", "degraded"} & set(body)


def test_extensions_appear_when_set():
    body = ChatCompletion(
        id="chatcmpl-1",
        created=1,
        model="small",
        choices=[Choice(message=ResponseMessage(content="hi"), finish_reason="length", token_ids=[7])],
        usage=Usage(),
        prompt_token_ids=[1, 2],
        degraded={"dropped_modalities": ["audio"]},
    ).model_dump(mode="json")
    assert_valid(body, COMPLETION)
    assert (body["choices"][0]["token_ids"], body["prompt_token_ids"]) == ([7], [1, 2])


def test_only_the_first_delta_carries_the_role():
    first = _chunk(Delta(role="assistant", content=""))
    later = _chunk(Delta(content="lo"))
    last = _chunk(Delta(content=""), finish_reason="length", token_ids=[3])
    for chunk in (first, later, last):
        assert_valid(chunk, CHUNK)
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert later["choices"][0]["delta"] == {"content": "lo"}
    assert last["choices"][0]["token_ids"] == [3]
    assert later["usage"] is None  # null until the last chunk; the stream drops it when usage was not asked for
