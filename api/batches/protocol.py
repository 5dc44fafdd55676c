"""OpenAI's batch structs: the create request, and the batch object the API answers with."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings")


class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="allow")

    input_file_id: str = Field(min_length=1, max_length=64)
    endpoint: Literal["/v1/chat/completions", "/v1/responses", "/v1/embeddings"]
    completion_window: Literal["24h"] = "24h"
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class BatchObject(BaseModel):
    """Documents the batch object (storage.batches builds it)."""

    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: dict[str, Any] | None
    input_file_id: str
    completion_window: str
    status: Literal[
        "validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled"
    ]
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: int | None
    expires_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: RequestCounts
    metadata: dict[str, str] | None


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
