"""The embeddings endpoint's one path, shared by `/v1/embeddings` and the console's playground: read the request,
tokenize every input in Tessera (usage is the tokenizer's count, and limits are checked before an engine sees
anything), embed them under one lease, and render OpenAI's response.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import numpy as np
from pydantic import ValidationError

from api.embeddings.protocol import EmbeddingRequest
from api.parsing import param_path, read_json_object
from serving.errors import InvalidRequest
from serving.pools import TaskPool
from serving.record import TokenUsage
from serving.task_lease import TaskService
from tenancy.directory import Principal
from tenancy.quotas import QuotaGate

logger = logging.getLogger(__name__)


def parse_embedding_request(body: bytes) -> EmbeddingRequest:
    data = read_json_object(body)
    try:
        return EmbeddingRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = param_path(tuple(first["loc"])) or None
        if param and param.startswith("input"):
            param = "input"  # the union's branches would each name a path of their own
            message = (
                "input must be a non-empty string, a list of strings, a list of token ids or a list of lists of them"
            )
        else:
            message = f"invalid value for '{param}': {first['msg']}"
        missing = first["type"] == "missing"
        if missing:
            message = f"missing required field '{param}'"
        raise InvalidRequest(message, param=param, code="missing_field" if missing else "invalid_value") from exc


def _inputs(req: EmbeddingRequest) -> list[str | list[int]]:
    raw: Any = req.input
    if isinstance(raw, str):
        items: list[str | list[int]] = [raw]
    elif raw and all(isinstance(x, int) for x in raw):
        items = [list(raw)]
    else:
        items = list(raw)
    if not items:
        raise InvalidRequest("input must not be empty", param="input", code="invalid_value")
    return items


def tokenize(pool: TaskPool, req: EmbeddingRequest, max_inputs: int) -> list[list[int]]:
    """Each input's token ids: strings through the pool's tokenizer (with its special tokens), token ids as sent;
    a 400 naming `input` for too many inputs, an empty one, an unknown token id or an input over the context."""
    items = _inputs(req)
    if len(items) > max_inputs:
        raise InvalidRequest(
            f"at most {max_inputs} inputs per request; this one has {len(items)}", param="input", code="too_many_inputs"
        )
    vocab = len(pool.tokenizer)
    out: list[list[int]] = []
    with pool.tokenizer_lock:
        for i, item in enumerate(items):
            where = "input" if len(items) == 1 else f"input[{i}]"
            if isinstance(item, str):
                if not item:
                    raise InvalidRequest(f"{where} is an empty string", param="input", code="invalid_value")
                ids = list(pool.tokenizer(item, add_special_tokens=True)["input_ids"])
            else:
                if not item:
                    raise InvalidRequest(f"{where} is an empty list of tokens", param="input", code="invalid_value")
                bad = next((t for t in item if not 0 <= t < vocab), None)
                if bad is not None:
                    raise InvalidRequest(
                        f"{where} holds the token id {bad}, outside model '{pool.name}'s vocabulary (0-{vocab - 1})",
                        param="input",
                        code="invalid_value",
                    )
                ids = list(item)
            if len(ids) > pool.max_model_len:
                raise InvalidRequest(
                    f"{where} has {len(ids)} tokens; model '{pool.name}' takes at most {pool.max_model_len} per input",
                    param="input",
                    code="context_length_exceeded",
                )
            out.append(ids)
    return out


def check_dimensions(pool: TaskPool, dimensions: int | None) -> int | None:
    """The `dimensions` to ask the engine for: None when unset or the model's own size; a 400 for any other size on
    a model not trained to shorten its embeddings (Matryoshka)."""
    if dimensions is None:
        return None
    config = pool.engine.hf_config()
    native = int(getattr(config, "hidden_size", 0) or 0)
    if dimensions == native:
        return None
    if getattr(config, "is_matryoshka", False) or getattr(config, "matryoshka_dimensions", None):
        return dimensions
    raise InvalidRequest(
        f"model '{pool.name}' does not support `dimensions`: its embeddings have {native} dimensions",
        param="dimensions",
        code="unsupported_parameter",
    )


def encode(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
    return vector


async def create_embeddings(
    req: EmbeddingRequest, principal: Principal, service: TaskService, quotas: QuotaGate, *, max_inputs: int
) -> tuple[dict[str, Any], str]:
    """OpenAI's embeddings response and the request id."""
    pool = service.pool(req.model, "embedding")
    dimensions = check_dimensions(pool, req.dimensions)
    token_lists = await asyncio.to_thread(tokenize, pool, req, max_inputs)
    tokens = sum(len(ids) for ids in token_lists)
    used = TokenUsage(prompt=tokens, text=tokens)
    async with service.lease(pool, quotas.policy(principal), "embeddings", used) as lease:
        vectors = await asyncio.gather(
            *(pool.engine.embed(f"{lease.request_id}-{i}", ids, dimensions) for i, ids in enumerate(token_lists))
        )
        lease.used = used
    await lease.require_recorded()
    body = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode(v, req.encoding_format)}
            for i, v in enumerate(vectors)
        ],
        "model": pool.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return body, lease.request_id
