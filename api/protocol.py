"""Wire structs every endpoint shares: models, OpenAI's error shape, and the bounds on what the API stores."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

# The largest count or price the API stores: within a database's 64-bit integers, and exact as a JSON number (a
# double) too, so that the documented maximum is the enforced one. Larger values are refused, not overflowed.
STORED_INT_MAX = 10**18

# Text the API stores: PostgreSQL text cannot hold NUL (0x00), so it is refused here rather than by the database.
StoredText = Annotated[str, Field(pattern=r"^[^\x00]*$")]


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tessera"
    modalities: list[str]
    max_model_len: int
    aliases: list[str] = Field(default_factory=list)
    kind: Literal["chat", "embedding", "transcription"] = "chat"  # what the pool serves
    endpoints: list[str] = Field(default_factory=list)  # the routes that take it as `model`
    architecture: str | None = None  # the checkpoint's architecture (chat pools)
    # Where each medium is encoded: `gateway` (Tessera's encoder pools and embedding cache), `features` (the gateway
    # computes the tower's input, the engine runs the tower) or `engine`.
    encoding: dict[str, str] = Field(default_factory=dict)


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """Every error the API sends, at any status: OpenAI's error shape."""

    error: ErrorDetail
