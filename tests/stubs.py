"""Stand-ins for unit tests: an engine that replays deltas, a recording caller policy, and a service built on
them with the real pipeline, admission, lease and completion bus."""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field

import httpx

from serving.admission import AdmissionController
from serving.background import BackgroundTasks
from serving.encoders.encoding import MediaEncoder
from serving.engines.base import EngineCapacity, EngineDelta, EngineStats
from serving.errors import EngineUnavailable
from serving.ingest import MediaIngest
from serving.media.audio import AudioLoader
from serving.media.fetch import FetchPolicy, MediaFetcher
from serving.media.images import ImageLoader
from serving.metrics import ServerMetrics
from serving.pipeline import Pipeline
from serving.policy import CallerIdentity
from serving.pools import ModelPool, PoolRegistry
from serving.prompt_router import DEFAULT_BUCKETS, SLICES, PromptRouter, feature_count
from serving.record import CompletionBus, CompletionRecord, Journal, TokenUsage
from serving.service import InferenceService

IMAGE_TOKEN = 99
PROMPT = [5, IMAGE_TOKEN, IMAGE_TOKEN, 6]


def deltas() -> list[EngineDelta]:
    return [
        EngineDelta("Hel", [1], PROMPT, 0, None),
        EngineDelta("lo", [2], PROMPT, 0, None),
        EngineDelta("!", [3], PROMPT, 0, "length"),
    ]


class StubTokenizer:
    chat_template = "json"

    def apply_chat_template(self, messages, **_):
        return json.dumps(messages)

    def encode(self, text, add_special_tokens=False):
        return text.split()


class StubEngine:
    name = "stub"
    model_path = "/nonexistent"
    capacity = EngineCapacity(num_blocks=100, block_size=16, max_model_len=4096)

    def __init__(self, replay=None, fail_at=None, hang_at=None):
        self.stats = EngineStats()
        self._replay = deltas() if replay is None else replay
        self._fail_at = fail_at
        self._hang_at = hang_at
        self.aborted: list[str] = []
        self.requests: list = []
        self.replica_rows: list[dict] = []  # what a remote pool's picker would report

    async def generate(self, request):
        self.requests.append(request)
        for i, delta in enumerate(self._replay):
            if i == self._fail_at:
                raise EngineUnavailable("engine died mid-stream")
            if i == self._hang_at:
                await asyncio.sleep(3600)
            yield delta

    async def abort(self, request_id):
        self.aborted.append(request_id)

    def is_healthy(self):
        return True

    async def has_work(self, wait_s=5.0):
        return False

    def num_unfinished(self):
        return 0

    def replicas(self):
        return self.replica_rows

    def tokenizer(self):
        return StubTokenizer()

    def shutdown(self):
        pass


@dataclass
class RecordingHold:
    caller: RecordingCaller
    limits: dict[str, str] = field(default_factory=lambda: {"x-ratelimit-remaining-requests": "1"})

    async def settle(self, used: TokenUsage) -> None:
        self.caller.settled.append(used.total)


@dataclass
class RecordingCaller:
    """A caller policy that records what the lease asked of it."""

    allowed: set[str] | None = None
    salt: str = "salt-a"
    reserved: list[tuple[str, int]] = field(default_factory=list)
    worst: list[TokenUsage] = field(default_factory=list)  # each reservation's worst case, by modality
    settled: list[int] = field(default_factory=list)
    prechecked: int = 0

    @property
    def identity(self) -> CallerIdentity:
        return CallerIdentity("tenant-a", "key-a")

    @property
    def cache_salt(self) -> str:
        return self.salt

    def check_model(self, model: str) -> None:
        from serving.errors import PermissionDenied

        if self.allowed is not None and model not in self.allowed:
            raise PermissionDenied(f"not {model}", code="model_not_allowed", param="model")

    async def precheck(self) -> None:
        self.prechecked += 1

    async def reserve(self, model: str, worst: TokenUsage) -> RecordingHold:
        self.reserved.append((model, worst.total))
        self.worst.append(worst)
        return RecordingHold(self)


@dataclass
class Harness:
    service: InferenceService
    pool: ModelPool
    engine: StubEngine
    records: list[CompletionRecord]
    tasks: BackgroundTasks


class StubCounter:
    """Stands for the engine's processor in unit tests without an engine: Qwen2-VL's resize rule (14 px patches
    merged 2x2, 56² to 224² pixels) and 25 audio tokens a second."""

    async def count(self, medium: str, size: tuple[int, ...]) -> int:
        if medium == "audio":
            return size[0] * 25 // 16000
        width, height = size
        scale = min(1.0, (224 * 224 / (width * height)) ** 0.5)
        scale = max(scale, (56 * 56 / (width * height)) ** 0.5)
        return max(1, round(height * scale / 28)) * max(1, round(width * scale / 28))

    def close(self) -> None:
        return None


def harness(
    engine: StubEngine | None = None,
    vision=None,
    *,
    pinned_media: set[str] | None = None,
    shared_cache_salt: str | None = None,
    journal: Journal | None = None,
) -> Harness:
    engine = engine or StubEngine()
    pool = ModelPool(
        "stub",
        engine,  # type: ignore[arg-type]
        modalities=["text", "image", "audio"],
        media_token_ids={"image": IMAGE_TOKEN},
        counter=StubCounter(),  # type: ignore[arg-type]
    )
    pool.vision = vision
    pool.admission = AdmissionController(total_blocks=100, block_size=16, headroom_blocks=0)
    policy = FetchPolicy.build(timeout_s=1, max_bytes=1000, max_redirects=0, allow=())
    ingest = MediaIngest(
        ImageLoader(max_pixels=10**7, fetcher=MediaFetcher(httpx.AsyncClient(), policy)),
        AudioLoader(target_rate=16000, max_seconds=30),
        workers=1,
    )
    records: list[CompletionRecord] = []
    tasks = BackgroundTasks()
    metrics = ServerMetrics()
    bus = CompletionBus(tasks, [metrics.record_completion, records.append], journal=journal)
    pipeline = Pipeline(
        PoolRegistry([pool]), ingest, max_images=4, pinned_media=pinned_media, shared_cache_salt=shared_cache_salt
    )
    return Harness(
        InferenceService(pipeline, MediaEncoder(ingest, None), metrics, bus, tasks), pool, engine, records, tasks
    )


def slice_router(threshold: float = 0.5, **p_by_slice: float) -> PromptRouter:
    """A router whose P(the weak pool is right) depends on the slice alone: `slice_router(text=0.95, image=0.05)`
    (`image_audio` for image+audio; a slice not named: 0.5)."""
    weights = [0.0] * feature_count(DEFAULT_BUCKETS)
    for i, name in enumerate(SLICES):
        p = p_by_slice.get(name.replace("+", "_"), 0.5)
        weights[i] = math.log(p / (1 - p))
    return PromptRouter(tuple(weights), threshold=threshold)
