"""OpenAI's embeddings request and response."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    # A string, a list of strings, a list of token ids, or a list of lists of token ids.
    input: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    model: str = Field(min_length=1, max_length=128)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = Field(default=None, max_length=256)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # base64: the little-endian float32 bytes


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
