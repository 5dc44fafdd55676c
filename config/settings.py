"""Typed settings for the whole server, read from `TESSERA_*` environment variables and CLI flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

Modality = Literal["text", "image", "audio"]
CHAT_MAX_MODEL_LEN = 4096  # a chat pool's context when it sets none
# What a pool serves: chat completions (and the Responses API), embeddings, or speech to text.
PoolKind = Literal["chat", "embedding", "transcription"]


class PoolSettings(BaseModel):
    """One model pool: a checkpoint served by one vLLM engine."""

    name: str = Field(description="Pool name clients send as `model`, e.g. `small` or `large`.")
    kind: PoolKind = Field(
        default="chat",
        description="What the pool serves: `chat` (/v1/chat/completions, /v1/responses), `embedding` (/v1/embeddings, "
        "vLLM's pooling runner) or `transcription` (/v1/audio/transcriptions, a Whisper checkpoint).",
    )
    model: str | None = Field(
        default=None, description="Checkpoint directory. Unset: the embedded demo checkpoint named after the pool."
    )
    aliases: list[str] = Field(default_factory=list, description="Other names that select this pool.")
    modalities: list[Modality] | None = Field(
        default=None, description="Accept only these input modalities. Unset: all the checkpoint supports."
    )
    dtype: str = Field(default="float32", description="Weights dtype passed to vLLM (`float32` is exact on CPU).")
    max_model_len: int | None = Field(
        default=None,
        description="Context length the engine is started with. Unset: 4096 for chat pools, the checkpoint's own for "
        "embedding and transcription pools.",
    )
    tensor_parallel_size: int = Field(default=1, description="Tensor parallelism (GPU machines).")
    gpu_memory_utilization: float = Field(default=0.9, description="Fraction of GPU memory vLLM may use (GPU only).")
    kv_cache_gib: float = Field(default=1.0, description="KV cache size on CPU, in GiB.")
    enforce_eager: bool = Field(default=True, description="Skip graph compilation: much faster start-up on CPU.")
    cpu_threads: int = Field(default=1, description="Compute threads of this pool's engine process on CPU.")
    max_num_seqs: int = Field(default=32, description="Most sequences the engine batches at once.")
    encoder_pools: Literal["auto"] | bool = Field(
        default="auto",
        description="Where media are encoded. `auto`: in Tessera's pools (micro-batched, with the embedding cache) "
        "where the gateway has an adapter for the checkpoint's architecture (`tessera models inspect PATH` says), "
        "else by the engine; `true`: in Tessera's pools, and a checkpoint without an adapter is refused at start-up; "
        "`false`: by the engine's own encoders.",
    )
    admission: bool = Field(default=True, description="Admit requests by KV blocks before they reach the engine.")
    kv_headroom_fraction: float = Field(default=0.1, description="KV blocks held back for decode headroom.")
    strength: int | None = Field(default=None, description="Routing rank for `auto`; unset: the pool's position.")
    tool_parser: str | None = Field(
        default=None,
        description="vLLM tool-call parser for `tool_choice: auto`, matching the chat template (e.g. `hermes`); "
        "unset: `auto` is refused, `required` and named functions still work.",
    )
    max_concurrency: int = Field(
        default=8,
        ge=1,
        description="Embedding and transcription pools: requests admitted to the engine at once (they hold no KV "
        "cache to budget by); more wait in the pool's admission queue, and a full queue is a 503.",
    )
    audio_tokens_per_second: int = Field(
        default=50,
        ge=1,
        description="Transcription pools: audio tokens a second of audio counts as against token quotas (Whisper's "
        "encoder holds 50 positions a second).",
    )
    encoder_replicas: list[str] = Field(
        default_factory=list,
        description="Chat pools on replicas: base URLs of vLLM encoder-only instances (`vllm serve --mm-encoder-only "
        "--enable-scale-out`, an `ec_producer`) that share an encoder-cache store with the pool's replicas (each an "
        "`ec_consumer`). Media the gateway sends raw are encoded there first and the replica loads the result; "
        "empty: each replica encodes its own raw media. See docs/fleet.md, 'An encoder tier of vLLM's own'.",
    )
    replicas: list[str] = Field(
        default_factory=list,
        description="Base URLs of remote `vllm serve` replicas serving `model` (chat and transcription pools: with "
        "`--enable-scale-out`, see docs/fleet.md; embedding pools: `--runner pooling`); empty: an in-process engine. "
        "A remote pool still reads `model` locally for its config, tokenizer and encoders.",
    )


def _default_pools() -> list[PoolSettings]:
    return [
        PoolSettings(name="small", aliases=["8b"]),
        PoolSettings(name="large", aliases=["70b"], tool_parser="hermes"),
        PoolSettings(name="minilm", kind="embedding", aliases=["embed"], kv_cache_gib=0.0625),
        PoolSettings(name="whisper", kind="transcription", aliases=["whisper-1"], kv_cache_gib=0.25),
    ]


class Settings(BaseSettings):
    """Every knob of the server. Environment: `TESSERA_<FIELD>`; nested pools as JSON in `TESSERA_POOLS`."""

    model_config = SettingsConfigDict(env_prefix="TESSERA_", env_nested_delimiter="__", extra="ignore")

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    journal_heartbeat_s: float = Field(
        default=10.0, gt=0, description="How often this gateway marks itself alive for the usage journal."
    )
    journal_stale_s: float = Field(
        default=60.0,
        gt=0,
        description="A gateway silent this long is dead: its running requests are settled as interrupted.",
    )
    fleet_policy: Literal["picker", "round_robin"] = Field(
        default="picker",
        description="How a remote pool chooses a replica: live load plus media and prefix affinity, or round robin.",
    )
    fleet_scrape_interval_s: float = Field(
        default=0.25, gt=0, le=5, description="How often each replica's /metrics is read."
    )
    fleet_connect_timeout_s: float = Field(default=2.0, gt=0, description="Connect timeout to a replica.")
    fleet_read_timeout_s: float = Field(
        default=300.0, gt=0, description="Longest silence on a replica's stream, queueing included."
    )
    port: int = Field(default=8000, description="Port to listen on.")
    data_dir: Path = Field(default=Path(".tessera"), description="Where the SQLite file and demo checkpoints live.")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL. Unset: a SQLite file `tessera.db` in `data_dir`."
    )
    models_dir: Path | None = Field(
        default=None, description="Where demo checkpoints are built. Unset: `models` inside `data_dir`."
    )
    api_key: str | None = Field(
        default=None,
        description="A key for the demo tenant, registered at start-up. Unset: the embedded default issues one "
        "and prints it.",
    )
    admin_key: str | None = Field(default=None, description="Static admin key for /admin and the console.")
    key_secret: str | None = Field(
        default=None,
        description="Per-deployment secret that API keys are hashed with. Unset: generated once into `data_dir`.",
    )
    demo_tenant: str | None = Field(
        default="demo", description="Tenant created at start-up for the embedded default; empty to skip."
    )
    redis_url: str | None = Field(
        default=None, description="Redis for rate limits shared by replicas. Unset: limits are kept in-process."
    )
    console_session_hours: float = Field(
        default=12.0, gt=0, description="How long a console sign-in lasts before signing in again."
    )
    console_secure_cookies: bool = Field(
        default=False,
        description="Always mark console cookies Secure. Off: they are Secure when the request came over https "
        "(directly, or through a trusted proxy's X-Forwarded-Proto).",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="IPs or CIDRs of reverse proxies whose X-Forwarded-Proto and X-Forwarded-For are believed; "
        "empty: no peer's forwarding headers are.",
    )
    keep_alive_s: float = Field(
        default=75.0,
        gt=0,
        description="How long an idle client connection stays open, in seconds. Keep it above the idle timeout "
        "of clients and proxies in front (the OpenAI SDK's httpx pool keeps connections 5 s): a server that closes "
        "first races the client's next request on that connection, which then fails to read.",
    )
    stripe_api_key: str | None = Field(default=None, description="Stripe secret key; unset: meter events wait.")
    stripe_api_base: str | None = Field(default=None, description="Stripe API base URL (default Stripe's own).")
    stripe_webhook_secret: str | None = Field(default=None, description="Signing secret of the Stripe webhook.")
    rate_window_s: float = Field(default=60.0, description="Window of the tokens-per-minute limit, in seconds.")
    pools: list[PoolSettings] = Field(default_factory=_default_pools, description="Model pools to serve.")
    build_demo_models: bool = Field(default=True, description="Build missing demo checkpoints at start-up.")

    max_body_bytes: int = Field(default=32 * 1024 * 1024, description="Largest request body accepted (413 above).")
    max_images_per_request: int = Field(default=8, description="Most `image_url` parts in one request.")
    max_image_pixels: int = Field(default=40_000_000, description="Decoded pixel limit; larger images are refused.")
    max_request_pixels: int = Field(
        default=64_000_000, description="Decoded pixel limit for all of a request's images together."
    )
    max_audio_seconds: float = Field(default=30.0, description="Longest audio clip accepted in a chat request.")
    max_transcription_seconds: float = Field(
        default=600.0, gt=0, description="Longest audio file /v1/audio/transcriptions and /translations accept."
    )
    max_transcription_bytes: int = Field(
        default=25 * 1024 * 1024, gt=0, description="Largest audio file the transcription endpoints accept (413)."
    )
    max_embedding_inputs: int = Field(default=2048, ge=1, description="Most inputs in one /v1/embeddings request.")
    transcription_cache_days: int = Field(
        default=7,
        ge=0,
        description="Days a tenant's transcript of an audio file is kept for the same file sent again "
        "at temperature 0 (0: no results cache).",
    )
    media_workers: int = Field(default=2, description="Threads that decode media, off the event loop.")
    fetch_timeout_s: float = Field(default=10.0, description="Timeout for fetching an http(s) image URL.")
    fetch_max_bytes: int = Field(default=20 * 1024 * 1024, description="Byte cap for a fetched image.")
    fetch_max_redirects: int = Field(default=3, description="Redirects followed when fetching an image URL.")
    fetch_allow_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts or CIDRs that may be fetched although private, loopback or link-local.",
    )
    encoder_window_ms: float = Field(default=12.0, description="Micro-batching window of the encoder pools.")
    encoder_max_batch: int = Field(default=48, description="Most images per encoder forward pass.")
    encoder_device: str = Field(
        default="auto",
        description="Torch device of the vision encoder pools (`cpu`, `cuda`, `cuda:1`). `auto`: the first GPU "
        "when torch sees one, else the CPU.",
    )
    encoder_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32",
        description="Compute dtype of the vision encoder pools. `float32` is exact; `bfloat16`/`float16` are for "
        "GPUs (`float16` on the CPU is refused at start-up). Embeddings reach the engine in float32 either way.",
    )
    encoder_threads: int = Field(default=1, ge=1, description="Torch threads of the vision encoder on the CPU.")
    embedding_cache: bool = Field(default=True, description="Cache encoder outputs by content hash.")
    embedding_cache_memory_mib: int = Field(default=256, description="In-memory tier of the embedding cache.")
    embedding_cache_disk_gib: float = Field(default=4.0, description="File-store tier of the embedding cache.")
    embedding_cache_ttl_s: float = Field(default=7 * 86400, description="Lifetime of a cached embedding.")
    files_dir: Path | None = Field(
        default=None,
        description="Where stored media (of stored responses) live, a folder every gateway replica reaches (a shared "
        "volume). Unset: `files` in `data_dir`.",
    )
    max_file_bytes: int = Field(
        default=100 * 1024 * 1024, gt=0, description="Largest file `/v1/files` accepts (413 above)."
    )
    file_expiry_days: int = Field(default=30, ge=1, description="Days an uploaded file is kept before it is deleted.")
    job_poll_s: float = Field(
        default=1.0, gt=0, description="How often an idle gateway looks for queued background work (jobs)."
    )
    job_lease_s: float = Field(
        default=60.0,
        gt=0,
        description="A job's lease, renewed while its gateway works on it: how long a job whose gateway died waits "
        "before another gateway takes it over.",
    )
    job_concurrency: int = Field(
        default=4, ge=1, description="Jobs (batches, background responses, sweeps) a gateway works on at once."
    )
    batch_concurrency: int = Field(
        default=8,
        ge=1,
        description="Batch lines a gateway runs at once, across its batches (each also waits for its pool's idle "
        "time: no interactive request queued, room in the batch share of the KV budget).",
    )
    batch_turn_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a batch runs lines before it goes back to the job queue, behind other tenants' work.",
    )
    response_sweep_interval_s: float = Field(
        default=3600.0,
        gt=0,
        description="How often stored responses past their tenant's retention and expired files are deleted (a "
        "periodic job: one gateway sweeps each time).",
    )
    embedding_cache_dir: Path | None = Field(
        default=None, description="File store of the embedding cache. Unset: `embeddings` in `data_dir`."
    )
    admission_max_queue: int = Field(default=64, description="Requests that may wait for KV capacity per pool.")
    admission_max_wait_s: float = Field(default=30.0, description="Longest wait for KV capacity (then 503).")
    shared_cache_salt: str | None = Field(
        default=None, description="Prefix-cache salt shared by requests whose media are all pinned references."
    )
    pinned_media: list[str] = Field(
        default_factory=list, description="sha256 content hashes of public reference media (see shared salt)."
    )
    grounding: bool = Field(
        default=True,
        description="Score answers to audio requests against a transcript of the audio, after the response.",
    )
    grounding_transcript_hint: str | None = Field(
        default=None,
        description="Names and terms the grounding transcriber should expect in request audio, as one line of text "
        "(Whisper spells them as written here). Unset: the hint file beside the strongest audio pool's checkpoint "
        "(grounding/transcript_hint.txt), if it has one; empty: no hint.",
    )
    grounding_verdict_wait_s: float = Field(
        default=20.0,
        gt=0.0,
        le=600.0,
        description="How long a response under the `flag` or `block` guardrail (and a cascade's first attempt) waits "
        "for its grounding verdict before it is answered without one; the score is still stored when it comes. A "
        "judge's questions queue behind other work on the judge pool, so a busy pool may need longer.",
    )
    grounding_judge: str | None = Field(
        default=None,
        description="The pool a tenant's `judge` grounding evidence asks its yes/no questions (grounding.judge). "
        "Unset: the strongest pool that takes every medium of the request.",
    )
    grounding_judge_threshold: float | None = Field(
        default=None,
        gt=0.0,
        lt=1.0,
        description="The judge's P(yes) at or above which a claim is supported; choose it on a calibration split "
        "(`tessera eval grounding --set demo/golden/calibration.jsonl --calibrate-judge`). Unset: the threshold "
        "calibrated for the judge pool's checkpoint (grounding/judge.json beside it), else 0.5.",
    )
    grounding_judge_open_threshold: float | None = Field(
        default=None,
        gt=0.0,
        lt=1.0,
        description="The probability of the value a claim states (a count, colour or place seen; a day, hour, "
        "count or colour heard), read from the judge's answer to an open question, at or above which the claim "
        "is supported; calibrated with the yes/no threshold. Unset: "
        "`grounding_judge_threshold` if that is set, else the judge pool checkpoint's calibrated open threshold, "
        "else 0.5.",
    )
    router_path: Path | None = Field(
        default=None,
        description="The fitted router the `router` routing policy asks (`tessera eval routing --router-out`). "
        "Unset: `router.json` in the models directory where one is there, else none (the policy then places "
        "requests by the heuristic and says so in `x-tessera-route`).",
    )
    default_max_tokens: int = Field(default=256, description="Completion length when the client sets none.")
    log_level: str = Field(default="INFO", description="Log level of the server.")

    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'tessera.db').resolve()}"

    def resolved_files_dir(self) -> Path:
        return self.files_dir or self.data_dir / "files"

    def demo_dir(self) -> Path:
        return self.models_dir or self.data_dir / "models"

    def resolved_router_path(self) -> Path | None:
        """The router file to load: `router_path` (which must exist), else `router.json` beside the checkpoints
        where there is one."""
        if self.router_path is not None:
            return self.router_path
        beside = self.demo_dir() / "router.json"
        return beside if beside.is_file() else None
