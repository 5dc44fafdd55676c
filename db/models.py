"""SQLModel tables shared by every package."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, Index
from sqlmodel import Field, SQLModel

MODALITY_TEXT, MODALITY_IMAGE, MODALITY_AUDIO = 1, 2, 4


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(moment: datetime) -> datetime:
    """A stored moment in UTC: SQLite gives datetimes back without their zone."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Tenant(SQLModel, table=True):
    __tablename__ = "tenants"

    id: str = Field(primary_key=True, max_length=36)
    name: str = Field(max_length=128, unique=True)
    status: str = Field(default="active", max_length=16)  # active | suspended
    created_at: datetime = Field(default_factory=utcnow)


class ApiKey(SQLModel, table=True):
    """Only an HMAC of the key is stored, with a short visible prefix for people to recognise it by."""

    __tablename__ = "api_keys"

    id: str = Field(primary_key=True, max_length=36)
    tenant_id: str | None = Field(default=None, foreign_key="tenants.id", index=True, max_length=36)
    prefix: str = Field(max_length=32, index=True)
    key_hash: str = Field(max_length=64, unique=True)
    name: str = Field(default="", max_length=128)
    is_admin: bool = False
    allowed_models: str | None = None  # comma-separated pool names; null means every model
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)


class TenantQuota(SQLModel, table=True):
    __tablename__ = "tenant_quota"

    tenant_id: str = Field(primary_key=True, foreign_key="tenants.id", max_length=36)
    tokens_per_minute: int = 100_000
    concurrent_requests: int = 16
    monthly_token_budget: int | None = None
    monthly_cost_budget_micros: int | None = None  # in millionths of the currency unit
    tier: str = Field(default="standard", max_length=32)
    # The grounding guardrail (grounding.guardrail): off | score | flag | block, and the score an answer must reach
    # (1.0: every claim supported).
    grounding_policy: str = Field(default="score", max_length=8)
    grounding_threshold: float = 1.0
    # What checks an answer's claims: `label_head` (the tower's label head and the clip's transcript), `judge` (a
    # pool asked a yes/no question per claim, grounding.judge) or `both`.
    grounding_evidence: str = Field(default="label_head", max_length=10)
    # Stored responses (`/v1/responses` with `store`): off turns storage off for the tenant; kept this many days.
    store_responses: bool = True
    response_retention_days: int = 30
    # What `model: "auto"` does for the tenant (serving.routing): heuristic | cascade | weakest | strongest.
    routing_policy: str = Field(default="heuristic", max_length=16)


class InferenceRequest(SQLModel, table=True):
    """One row per request that reached an engine: what it carried, what it cost in tokens, how it ended."""

    __tablename__ = "inference_requests"
    __table_args__ = (
        Index("ix_inference_requests_tenant_created", "tenant_id", "created_at"),
        Index("ix_inference_requests_fingerprint", "tenant_id", "prompt_fingerprint"),
    )

    request_id: str = Field(primary_key=True, max_length=64)
    tenant_id: str | None = Field(default=None, index=True, max_length=36)
    api_key_id: str | None = Field(default=None, max_length=36)
    model_variant: str = Field(max_length=64, index=True)
    modality_mask: int = Field(ge=1, le=7)
    text_tokens: int = 0
    vision_tokens: int = 0
    audio_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    status: str = Field(max_length=16)  # running | completed | cancelled | failed | interrupted
    ttft_ms: int | None = None
    total_latency_ms: int | None = None
    cached_image_tokens: int = 0
    cached_audio_tokens: int = 0
    cost_micros: int = 0
    grounding_score: float | None = None
    # The answer's claims its media did not support, as the grounding scorer worded them (null until scored).
    grounding_unsupported: list[str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # Each checked claim: {claim, evidence (label_head or judge), supported, p_yes (the judge's)}.
    grounding_checked: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    grounding_passed: bool | None = None  # the score against the tenant's threshold when it was scored
    question_kind: str | None = Field(default=None, max_length=24)  # grounding.questions' kind of the last question
    # sha256 of the last user turn's text and media, to tell a regeneration (the same ask again) from a new one.
    prompt_fingerprint: str | None = Field(default=None, max_length=64)
    feedback: int | None = None  # the tenant's thumbs on the answer: 1 up, -1 down
    created_at: datetime = Field(default_factory=utcnow, index=True)
    owner: str | None = Field(default=None, max_length=36, index=True)  # the gateway instance running it
    # interactive | batch: a batch line is billed at its model's batch price, and its batch settles its row.
    priority: str = Field(default="interactive", max_length=16)
    endpoint: str = Field(default="chat", max_length=16)  # chat | embeddings | transcriptions | translations
    audio_ms: int = 0  # a transcription's audio, billed per second
    cached_audio_ms: int = 0  # of it, what the tenant's results cache answered (billed at the cached rate)
    trace_id: str | None = Field(default=None, max_length=32)  # its OpenTelemetry trace, when traces are on
    route_reason: str | None = Field(default=None, max_length=96)  # why routing chose its pool (serving.routing)
    # A second attempt at the same answer (a cascade's escalation, a guardrail's regeneration): the first's id.
    attempt_of: str | None = Field(default=None, max_length=64, index=True)


class TranscriptionCacheEntry(SQLModel, table=True):
    """A tenant's transcript of one audio file at temperature 0, answered again when the same file comes back with
    the same model, language, prompt and response format."""

    __tablename__ = "transcription_cache"

    cache_key: str = Field(primary_key=True, max_length=64)  # sha256(tenant, content hash, model, options)
    tenant_id: str = Field(max_length=36)
    body: str  # the response as first sent (json, text, srt, vtt or verbose_json)
    audio_ms: int
    output_tokens: int
    created_at: datetime = Field(default_factory=utcnow, index=True)


class GatewayInstance(SQLModel, table=True):
    """A running gateway process, kept alive by its heartbeat; the usage rows it left `running` when its
    heartbeat stopped are settled as interrupted by whichever gateway notices."""

    __tablename__ = "gateway_instances"

    id: str = Field(primary_key=True, max_length=36)
    hostname: str = Field(max_length=255)
    pid: int
    started_at: datetime = Field(default_factory=utcnow)
    heartbeat_at: datetime = Field(default_factory=utcnow, index=True)


class MediaEmbeddingCacheEntry(SQLModel, table=True):
    """Index of the persistent embedding cache: one row per (media, encoder) pair; tensors live in files."""

    __tablename__ = "media_embedding_cache"

    cache_key: str = Field(primary_key=True, max_length=64)  # sha256(encoder identity, content hash)
    content_hash: str = Field(max_length=64, index=True)  # full sha256 of the canonical media
    encoder_id: str = Field(max_length=64)
    media_kind: str = Field(max_length=8)  # image | audio
    token_count: int
    storage_uri: str
    checksum: str = Field(max_length=64)  # sha256 of the stored tensor bytes
    size_bytes: int
    hit_count: int = 0
    last_hit_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime = Field(index=True)


class StoredResponse(SQLModel, table=True):
    """A Responses API response kept for its tenant: the response object as returned, this request's own input
    items (media as content-hash references into the blob store), and the response it continued."""

    __tablename__ = "stored_responses"

    id: str = Field(primary_key=True, max_length=64)  # resp_<hex>
    tenant_id: str = Field(max_length=36, index=True)
    request_id: str = Field(max_length=64, index=True)  # the lease that answered (its usage row)
    previous_response_id: str | None = Field(default=None, max_length=64, index=True)
    conversation_id: str | None = Field(default=None, max_length=64, index=True)  # the named conversation it joined
    model: str = Field(max_length=128)
    status: str = Field(max_length=16)
    body: dict = Field(sa_column=Column(JSON, nullable=False))  # type: ignore[type-arg]
    input_items: list = Field(sa_column=Column(JSON, nullable=False))  # type: ignore[type-arg]
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime = Field(index=True)


class StoredResponseMedia(SQLModel, table=True):
    """Which stored blobs (media bytes by sha256) a stored response's input items use."""

    __tablename__ = "stored_response_media"

    response_id: str = Field(primary_key=True, foreign_key="stored_responses.id", max_length=64)
    sha256: str = Field(primary_key=True, max_length=64, index=True)


class StoredConversation(SQLModel, table=True):
    """A named conversation (`/v1/conversations`) of a tenant: its metadata and the counter that orders its items."""

    __tablename__ = "conversations"

    id: str = Field(primary_key=True, max_length=64)  # conv_<hex>
    tenant_id: str = Field(max_length=36, index=True)
    meta: dict = Field(sa_column=Column("metadata", JSON, nullable=False))  # type: ignore[type-arg]
    next_seq: int = 0  # the place the next appended item takes
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime = Field(index=True)  # its tenant's retention after its last change


class ConversationItem(SQLModel, table=True):
    """One item of a conversation, as stored: media parts hold content-hash references into the blob store."""

    __tablename__ = "conversation_items"
    __table_args__ = (Index("ux_conversation_items_seq", "conversation_id", "seq", unique=True),)

    conversation_id: str = Field(primary_key=True, foreign_key="conversations.id", max_length=64)
    id: str = Field(primary_key=True, max_length=64)
    seq: int
    item: dict = Field(sa_column=Column(JSON, nullable=False))  # type: ignore[type-arg]
    created_at: datetime = Field(default_factory=utcnow)


class ConversationMedia(SQLModel, table=True):
    """Which stored blobs a conversation's items use."""

    __tablename__ = "conversation_media"

    conversation_id: str = Field(primary_key=True, foreign_key="conversations.id", max_length=64)
    item_id: str = Field(primary_key=True, max_length=64)
    sha256: str = Field(primary_key=True, max_length=64, index=True)


class StoredFile(SQLModel, table=True):
    """A file a tenant uploaded (`/v1/files`): its row here, its bytes on the shared files volume."""

    __tablename__ = "files"

    id: str = Field(primary_key=True, max_length=64)  # file-<hex>
    tenant_id: str = Field(max_length=36, index=True)
    purpose: str = Field(max_length=32)
    filename: str = Field(max_length=255)
    bytes: int
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime = Field(index=True)


class Batch(SQLModel, table=True):
    """A batch of requests read from an uploaded file (`/v1/batches`), run line by line in the background."""

    __tablename__ = "batches"

    id: str = Field(primary_key=True, max_length=64)  # batch_<hex>
    tenant_id: str = Field(max_length=36, index=True)
    key_id: str = Field(max_length=64)  # whose policy its lines run under
    endpoint: str = Field(max_length=64)
    input_file_id: str = Field(max_length=64)
    completion_window: str = Field(default="24h", max_length=8)
    # validating | in_progress | finalizing | completed | failed | expired | cancelling | cancelled
    status: str = Field(default="validating", max_length=16)
    body: dict = Field(sa_column=Column(JSON, nullable=False))  # type: ignore[type-arg]  # the batch object
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime


class BatchLine(SQLModel, table=True):
    """One line of a batch: its request, and once run, its output or error line as the output files hold it."""

    __tablename__ = "batch_lines"

    batch_id: str = Field(primary_key=True, foreign_key="batches.id", max_length=64)
    line: int = Field(primary_key=True)  # 1-based, as the input file numbers them
    custom_id: str = Field(max_length=512)
    body: dict = Field(sa_column=Column(JSON, nullable=False))  # type: ignore[type-arg]
    result: dict | None = Field(default=None, sa_column=Column(JSON, nullable=True))  # type: ignore[type-arg]
    ok: bool | None = None  # None until it ran: True lands in the output file, False in the error file


class Job(SQLModel, table=True):
    """Background work that outlives a request (a background response, a batch): claimed by one gateway replica at a
    time under a lease it renews while it works, so a replica that dies hands its jobs to another."""

    __tablename__ = "jobs"

    id: str = Field(primary_key=True, max_length=64)
    kind: str = Field(max_length=32)
    tenant_id: str | None = Field(default=None, max_length=36, index=True)
    status: str = Field(
        default="queued", max_length=16, index=True
    )  # queued | running | succeeded | failed | cancelled
    payload: dict = Field(sa_column=Column(JSON, nullable=False))  # type: ignore[type-arg]
    attempts: int = 0
    owner: str | None = Field(default=None, max_length=64)
    lease_until: datetime | None = None
    cancel_requested: bool = False
    error: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    # Not claimed before this moment: a job that yields its turn, or a periodic one, waits here.
    ready_at: datetime = Field(default_factory=utcnow, index=True)
    claimed_at: datetime | None = None  # the last claim, which orders tenants for their next turn


class AuditEntry(SQLModel, table=True):
    """One admin change: who made it, what and to which target, the values before and after; written in the same
    transaction as the change (db.audit)."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_target", "target"),)

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(default_factory=utcnow, index=True)
    actor: str = Field(max_length=128)  # `api:<key prefix>`, `console:<key prefix>`, `cli:<user>` or `system`
    action: str = Field(max_length=64, index=True)  # e.g. tenant.create, quota.update, key.revoke, price.set
    target: str = Field(max_length=160)  # what changed: a tenant id, a key id, `model/dimension`
    before: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    after: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))


class ModelPrice(SQLModel, table=True):
    """Price per 1M tokens of one model and billable dimension, in millionths of the currency unit."""

    __tablename__ = "model_prices"

    model: str = Field(primary_key=True, max_length=64)
    dimension: str = Field(primary_key=True, max_length=32)  # billing.prices.DIMENSIONS, or batch_percent
    micros_per_million: int


class BillingOutbox(SQLModel, table=True):
    """Meter events waiting for Stripe, written in the same transaction as their usage row.

    A worker claims due rows for a lease (`claimed_by`, `claimed_until`); when the lease runs out unreleased (the
    worker died), the rows are due again. Rows Stripe will never accept end as `dead`, with the reason."""

    __tablename__ = "billing_outbox"
    __table_args__ = (Index("ix_billing_outbox_due", "status", "next_attempt_at"),)

    identifier: str = Field(primary_key=True, max_length=96)  # request id + dimension: Stripe dedupes on it
    request_id: str = Field(max_length=64, index=True)
    tenant_id: str = Field(max_length=36, index=True)
    dimension: str = Field(max_length=32)
    quantity: int
    status: str = Field(default="pending", max_length=16)  # pending | sent | dead
    attempts: int = 0
    next_attempt_at: datetime = Field(default_factory=utcnow)
    last_error: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    sent_at: datetime | None = None
    claimed_by: str | None = Field(default=None, max_length=64)  # the worker holding the lease
    claimed_until: datetime | None = None
    key_generation: int = 0  # part of the idempotency key; moves on after an answer Stripe may have saved (5xx)
    dead_at: datetime | None = None
    dead_reason: str | None = None


class StripeCustomer(SQLModel, table=True):
    __tablename__ = "stripe_customers"

    tenant_id: str = Field(primary_key=True, max_length=36)
    customer_id: str = Field(max_length=64, unique=True)
    created_at: datetime = Field(default_factory=utcnow)


class WebhookEvent(SQLModel, table=True):
    """Stripe webhook events received; the primary key makes a replay a no-op."""

    __tablename__ = "webhook_events"

    event_id: str = Field(primary_key=True, max_length=96)
    event_type: str = Field(max_length=96)
    received_at: datetime = Field(default_factory=utcnow)


class ConsoleSession(SQLModel, table=True):
    """One console sign-in. The session cookie names it by a random id, of which only a hash is kept; signing out
    deletes the row, so a copied cookie stops working everywhere at once."""

    __tablename__ = "console_sessions"

    id_hash: str = Field(primary_key=True, max_length=64)  # sha256 of the id in the cookie
    kind: str = Field(max_length=8)  # tenant | admin
    subject: str = Field(max_length=128)  # the tenant key's id, or the admin marker (see console.auth)
    issued_at: datetime = Field(default_factory=utcnow, index=True)
