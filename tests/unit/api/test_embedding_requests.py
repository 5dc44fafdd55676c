"""The embeddings request as read and tokenized before any engine sees it (with all-MiniLM-L6-v2's real
tokenizer): every input shape OpenAI allows, and a 400 naming `input` or `dimensions` for what cannot run."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import numpy as np
import pytest

from api.embeddings.service import check_dimensions, encode, parse_embedding_request, tokenize
from serving.errors import InvalidRequest
from serving.pools import TaskPool


@pytest.fixture(scope="module")
def pool():
    from transformers import AutoTokenizer

    from grounding.models import default_minilm_dir

    engine = SimpleNamespace(
        capacity=SimpleNamespace(max_model_len=16), hf_config=lambda: SimpleNamespace(hidden_size=384)
    )
    return TaskPool("minilm", "embedding", engine, AutoTokenizer.from_pretrained(default_minilm_dir()))


def _req(**body):
    return parse_embedding_request(json.dumps({"model": "minilm", **body}).encode())


def test_every_input_shape_becomes_token_lists(pool):
    one = tokenize(pool, _req(input="The cat sat."), 10)
    assert one == [pool.tokenizer("The cat sat.")["input_ids"]]
    assert one[0][0] == 101
    assert one[0][-1] == 102
    assert len(tokenize(pool, _req(input=["a cat", "a dog"]), 10)) == 2
    assert tokenize(pool, _req(input=[101, 2000, 102]), 10) == [[101, 2000, 102]]
    assert tokenize(pool, _req(input=[[101, 102], [101, 2000, 102]]), 10) == [[101, 102], [101, 2000, 102]]


@pytest.mark.parametrize(
    ("body", "max_inputs", "code"),
    [
        ({"input": ""}, 10, "invalid_value"),
        ({"input": []}, 10, "invalid_value"),
        ({"input": ["a", "b", "c"]}, 2, "too_many_inputs"),
        ({"input": [[101, 10**6]]}, 10, "invalid_value"),
        ({"input": [[]]}, 10, "invalid_value"),
        ({"input": "word " * 40}, 10, "context_length_exceeded"),
    ],
)
def test_inputs_that_cannot_run_are_refused_naming_input(pool, body, max_inputs, code):
    with pytest.raises(InvalidRequest) as refused:
        tokenize(pool, _req(**body), max_inputs)
    assert (refused.value.param, refused.value.code) == ("input", code)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ["a", 1]}, "input"),
        ({"input": {"text": "a"}}, "input"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"model": "", "input": "a"}, "model"),
    ],
)
def test_malformed_requests_name_their_field(body, param):
    with pytest.raises(InvalidRequest) as refused:
        parse_embedding_request(json.dumps({"model": "minilm", **body}).encode())
    assert refused.value.param == param


def test_dimensions_only_where_the_model_allows(pool):
    assert check_dimensions(pool, None) is None
    assert check_dimensions(pool, 384) is None
    with pytest.raises(InvalidRequest) as refused:
        check_dimensions(pool, 128)
    assert refused.value.param == "dimensions"


def test_base64_is_little_endian_float32():
    vector = [0.5, -1.25, 3.0]
    assert encode(vector, "float") == vector
    decoded = np.frombuffer(base64.b64decode(encode(vector, "base64")), dtype="<f4")
    assert decoded.tolist() == vector
