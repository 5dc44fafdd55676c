"""Every OpenAI request field is honoured, accepted without effect, or refused with a 400 naming it."""

import json

import pytest
from openai.types.chat import completion_create_params

from api.chat.fields import REFUSED
from api.chat.parsing import generation_request, parse_chat_request
from api.chat.protocol import ChatCompletionRequest
from serving.errors import InvalidRequest


def _generation(**body):
    raw = {"model": "small", "messages": [{"role": "user", "content": "x"}], **body}
    return generation_request(parse_chat_request(json.dumps(raw).encode()), 16)


def test_every_field_the_sdk_sends_is_decided():
    sdk_fields = set(completion_create_params.CompletionCreateParamsBase.__annotations__) | {"stream"}
    decided = set(ChatCompletionRequest.model_fields) | set(REFUSED)
    assert sdk_fields - decided == set()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"function_call": "auto"}, "function_call"),
        ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
        ({"reasoning_effort": "low"}, "reasoning_effort"),
        ({"verbosity": "low"}, "verbosity"),
        ({"web_search_options": {}}, "web_search_options"),
        ({"store": True}, "store"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"service_tier": "flex"}, "service_tier"),
        ({"logit_bias": {"abc": 1}}, "logit_bias"),
        ({"logit_bias": {"12": 500}}, "logit_bias.12"),
    ],
)
def test_fields_that_cannot_be_honoured_are_refused_by_name(body, param):
    with pytest.raises(InvalidRequest) as exc:
        _generation(**body)
    assert exc.value.param == param


def test_fields_without_effect_on_the_answer_are_accepted():
    req = _generation(
        store=False,
        modalities=["text"],
        service_tier="auto",
        metadata={"team": "a"},
        user="u1",
        safety_identifier="s",
        prompt_cache_key="k",
        reasoning_effort=None,
    )
    assert req.params.max_tokens == 16
    assert _generation(logit_bias={"12": -100, "7": 5.5}).params.logit_bias == {12: -100.0, 7: 5.5}
