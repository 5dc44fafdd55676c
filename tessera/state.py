"""The typed application state: everything the lifespan builds, handed to handlers by dependency injection.

`build_state` acquires each part on one `AsyncExitStack`, so teardown runs in reverse order of construction and
a failure half-way through start-up closes exactly what was already built.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy import Engine

from api.audio.service import Transcriber
from api.auth import Authenticator
from api.batches.runner import BATCH_JOB, BatchRunner
from api.responses.background import run_background_response
from api.responses.service import BACKGROUND_JOB
from billing.prices import PriceBook
from billing.stripe_meters import StripeMeters
from billing.worker import OutboxWorker
from config.settings import Settings
from grounding.judge import Judge
from grounding.service import GroundingService
from jobs.runner import Claimed, JobRunner
from serving.background import BackgroundTasks
from serving.encoders.cache import EmbeddingCache
from serving.encoders.encoding import MediaEncoder
from serving.errors import NotFound
from serving.ingest import MediaIngest
from serving.media.audio import AudioLoader
from serving.media.fetch import FetchPolicy, MediaFetcher
from serving.media.images import ImageLoader
from serving.metrics import ServerMetrics
from serving.pipeline import Pipeline
from serving.pools import PoolRegistry
from serving.prompt_router import PromptRouter, load_router
from serving.record import CompletionBus
from serving.routing import RoutingPolicy
from serving.service import InferenceService
from serving.task_lease import TaskService
from serving.tracing import Tracing
from storage.batches import BatchStore
from storage.blobs import BlobStore
from storage.conversations import ConversationStore
from storage.files import FileStore
from storage.responses import ResponseStore
from storage.transcripts import TranscriptStore
from tenancy.directory import Directory
from tenancy.limits import InProcessLimiter, RateLimiter, RedisLimiter
from tenancy.quotas import QuotaGate, judge_callers
from tenancy.revocations import ChangeFeed
from tenancy.store import open_database
from tenancy.usage_log import UsageJournal
from tessera.pools import CheckpointResolver, start_pools

logger = logging.getLogger(__name__)

AUDIO_SAMPLE_RATE = 16_000  # the Whisper-style feature extractors of the supported audio towers


@dataclass
class AppState:
    settings: Settings
    pools: PoolRegistry
    service: InferenceService
    quotas: QuotaGate
    metrics: ServerMetrics
    db: Engine
    directory: Directory
    auth: Authenticator
    demo_key: str | None
    demo_key_new: bool
    prices: PriceBook
    limiter: RateLimiter
    cache: EmbeddingCache | None = None
    grounding: GroundingService | None = None
    stored_responses: ResponseStore | None = None
    conversations: ConversationStore | None = None
    jobs: JobRunner | None = None
    files: FileStore | None = None
    batches: BatchStore | None = None
    task_service: TaskService | None = None
    transcriber: Transcriber | None = None


def _start_tracing(stack: contextlib.ExitStack | contextlib.AsyncExitStack) -> None:
    """Traces on when an OTLP endpoint is configured; registered early, so it shuts down (and flushes) last."""
    tracing = Tracing.from_env()
    if tracing is not None:
        stack.callback(tracing.shutdown)


async def _stopped(task: asyncio.Task[None]) -> None:
    """Cancel a background task and wait for it, so nothing it uses is closed under it."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _private_file(path: Path, make: Callable[[], str]) -> str:
    """Read a secret kept in the data dir, creating it (mode 0600) on first use."""
    if path.is_file():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


def console_secret(settings: Settings) -> str:
    """The per-deployment secret: keys are hashed with it, console sessions and CSRF tokens derive from it."""
    return settings.key_secret or _private_file(settings.data_dir / "key-secret", lambda: secrets.token_hex(32))


OPERATOR_KEY_NAME = "TESSERA_API_KEY"


def setup_tenancy(settings: Settings, db: Engine) -> tuple[Directory, str | None, bool]:
    """The key directory, plus the demo tenant's key: the configured one, or one issued once and kept."""
    directory = Directory(db, console_secret(settings))
    if not settings.demo_tenant:
        return directory, None, False
    try:
        tenant = directory.tenant(settings.demo_tenant)
    except NotFound:
        tenant = directory.create_tenant(settings.demo_tenant)
    if settings.api_key:
        key_id = directory.register_key(settings.api_key, tenant.id, name=OPERATOR_KEY_NAME)
        if retired := directory.retire_keys_named(OPERATOR_KEY_NAME, tenant.id, key_id):
            logger.warning("TESSERA_API_KEY changed: revoked %d earlier operator key(s)", retired)
        return directory, settings.api_key, False
    key_file = settings.data_dir / "demo-key"
    fresh = not key_file.is_file()
    key = _private_file(key_file, lambda: directory.issue_key(tenant.id, name="demo").key)
    return directory, key, fresh


def _router(settings: Settings) -> PromptRouter | None:
    """The `router` policy's fitted model, if one is configured or lies beside the checkpoints. A configured path
    that cannot be read stops the start: a tenant on `router` would otherwise be placed by the heuristic unseen."""
    path = settings.resolved_router_path()
    if path is None:
        return None
    router = load_router(path)
    logger.info("routing: the router policy reads %s (threshold %.2f)", path, router.threshold)
    return router


def _grounding(
    settings: Settings,
    db: Engine,
    tasks: BackgroundTasks,
    metrics: ServerMetrics,
    pools: PoolRegistry,
    bus: CompletionBus,
    stack: AsyncExitStack,
) -> GroundingService | None:
    """The grounding service, subscribed to completion records (None when grounding is off or its models are
    missing); its judge is attached once the inference service exists."""
    if not settings.grounding:
        return None
    grounding = GroundingService.create(
        db,
        tasks,
        registry=metrics.registry,
        transcript_hint=settings.grounding_transcript_hint,
        checkpoints=[p.audio.checkpoint for p in sorted(pools.pools, key=lambda p: -p.strength) if p.audio],
        verdict_wait_s=settings.grounding_verdict_wait_s,
    )
    if grounding is not None:
        bus.subscribe(grounding)
        stack.callback(grounding.close)
    return grounding


@asynccontextmanager
async def build_state(settings: Settings, checkpoints: CheckpointResolver | None = None) -> AsyncIterator[AppState]:
    async with AsyncExitStack() as stack:
        db = await asyncio.to_thread(open_database, settings.resolved_database_url())
        stack.callback(db.dispose)
        directory, demo_key, demo_key_new = await asyncio.to_thread(setup_tenancy, settings, db)
        limiter = _limiter(settings)
        if isinstance(limiter, RedisLimiter):
            stack.push_async_callback(limiter.close)
        if settings.redis_url:
            feed = ChangeFeed(settings.redis_url, directory)
            await feed.start()
            stack.push_async_callback(feed.close)
        _start_tracing(stack)
        pools = await start_pools(settings, stack, checkpoints)
        ingest = _media_ingest(settings, await stack.enter_async_context(_fetch_client(settings)))
        stack.callback(ingest.close)
        cache = await _embedding_cache(settings, db)
        metrics = ServerMetrics()
        metrics.attach_pools(pools, cache)
        prices = PriceBook(db)
        tasks = BackgroundTasks()
        stack.push_async_callback(tasks.drain)  # usage writes finish before the database closes
        journal = UsageJournal(db, prices, heartbeat_s=settings.journal_heartbeat_s, stale_s=settings.journal_stale_s)
        await journal.start()
        stack.push_async_callback(journal.stop)
        stored_responses = ResponseStore(db, BlobStore(settings.resolved_files_dir() / "media"))
        conversations = ConversationStore(db, stored_responses.blobs)
        files = FileStore(db, settings.resolved_files_dir() / "uploads")
        bus = CompletionBus(tasks, [metrics.record_completion], journal=journal)
        grounding = _grounding(settings, db, tasks, metrics, pools, bus, stack)
        if settings.stripe_api_key:
            meters = StripeMeters(settings.stripe_api_key, settings.stripe_api_base)
            stack.push_async_callback(meters.aclose)
            worker = OutboxWorker(db, meters, registry=metrics.registry)
            stack.push_async_callback(_stopped, asyncio.get_running_loop().create_task(worker.run_forever()))
        pipeline = Pipeline(
            pools,
            ingest,
            max_images=settings.max_images_per_request,
            pinned_media=set(settings.pinned_media),
            shared_cache_salt=settings.shared_cache_salt,
            routing=RoutingPolicy(router=_router(settings)),
        )
        service = InferenceService(pipeline, MediaEncoder(ingest, cache), metrics, bus, tasks, gate=grounding)
        quotas = QuotaGate(limiter, db, prices=prices)
        if grounding is not None:
            grounding.judge = Judge(
                service,
                judge_callers(directory, quotas),
                model=settings.grounding_judge,
                threshold=settings.grounding_judge_threshold,
                open_threshold=settings.grounding_judge_open_threshold,
            )
        background = functools.partial(
            run_background_response,
            directory=directory,
            quotas=quotas,
            service=service,
            store=stored_responses,
            conversations=conversations,
            default_max_tokens=settings.default_max_tokens,
        )
        batches = BatchStore(db)
        task_service = TaskService(pools, bus, tasks, metrics)
        batch = BatchRunner(
            directory=directory,
            quotas=quotas,
            service=service,
            batches=batches,
            files=files,
            responses=stored_responses,
            conversations=conversations,
            journal=journal,
            default_max_tokens=settings.default_max_tokens,
            file_expiry_days=settings.file_expiry_days,
            tasks=task_service,
            max_embedding_inputs=settings.max_embedding_inputs,
            concurrency=settings.batch_concurrency,
            turn_s=settings.batch_turn_s,
        )
        transcripts = TranscriptStore(db, settings.transcription_cache_days)
        transcriber = Transcriber(
            task_service,
            quotas,
            transcripts,
            max_seconds=settings.max_transcription_seconds,
            max_bytes=settings.max_transcription_bytes,
        )
        sweep = functools.partial(
            _sweep,
            (stored_responses.sweep, conversations.sweep, files.sweep, transcripts.sweep),
            interval_s=settings.response_sweep_interval_s,
        )
        jobs = JobRunner(
            db,
            {BACKGROUND_JOB: background, BATCH_JOB: batch, SWEEP_JOB: sweep},
            poll_s=settings.job_poll_s,
            lease_s=settings.job_lease_s,
            concurrency=settings.job_concurrency,
            gave_up={BATCH_JOB: batch.gave_up},
        )
        await asyncio.to_thread(jobs.schedule, SWEEP_JOB, SWEEP_JOB_ID)
        stack.push_async_callback(_stopped, asyncio.get_running_loop().create_task(jobs.run_forever()))
        yield AppState(
            settings=settings,
            pools=pools,
            service=service,
            quotas=quotas,
            metrics=metrics,
            db=db,
            directory=directory,
            auth=Authenticator(directory, settings.admin_key),
            demo_key=demo_key,
            demo_key_new=demo_key_new,
            prices=prices,
            limiter=limiter,
            cache=cache,
            grounding=grounding,
            stored_responses=stored_responses,
            conversations=conversations,
            jobs=jobs,
            files=files,
            batches=batches,
            task_service=task_service,
            transcriber=transcriber,
        )


SWEEP_JOB, SWEEP_JOB_ID = "sweep", "job_sweep"


async def _sweep(sweeps: tuple[Callable[[], int], ...], job: Claimed, *, interval_s: float) -> float:
    """The periodic sweep job: deletes stored responses and files past their retention or expiry, then asks to
    come back in `interval_s`. It is one job, so one gateway sweeps each time."""
    for sweep in sweeps:
        try:
            if swept := await asyncio.to_thread(sweep):
                logger.info("swept %d expired rows (%s)", swept, getattr(sweep, "__qualname__", sweep))
        except Exception:
            logger.exception("a sweep failed; trying again in %.0f s", interval_s)
    return interval_s


def _limiter(settings: Settings) -> RateLimiter:
    if settings.redis_url:
        return RedisLimiter(settings.redis_url, window_s=settings.rate_window_s)
    return InProcessLimiter(window_s=settings.rate_window_s)


def _fetch_client(settings: Settings) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=settings.fetch_timeout_s, headers={"user-agent": "tessera-media-fetch"})


def _media_ingest(settings: Settings, http: httpx.AsyncClient) -> MediaIngest:
    policy = FetchPolicy.build(
        timeout_s=settings.fetch_timeout_s,
        max_bytes=settings.fetch_max_bytes,
        max_redirects=settings.fetch_max_redirects,
        allow=settings.fetch_allow_hosts,
    )
    return MediaIngest(
        ImageLoader(max_pixels=settings.max_image_pixels, fetcher=MediaFetcher(http, policy)),
        AudioLoader(target_rate=AUDIO_SAMPLE_RATE, max_seconds=settings.max_audio_seconds),
        workers=settings.media_workers,
        max_request_pixels=settings.max_request_pixels,
    )


async def _embedding_cache(settings: Settings, db: Engine) -> EmbeddingCache | None:
    if not settings.embedding_cache:
        return None
    cache = EmbeddingCache(
        settings.embedding_cache_dir or settings.data_dir / "embeddings",
        db,
        memory_bytes=settings.embedding_cache_memory_mib << 20,
        ttl_s=settings.embedding_cache_ttl_s,
        disk_bytes=int(settings.embedding_cache_disk_gib * (1 << 30)),
    )
    await cache.sweep()
    return cache
