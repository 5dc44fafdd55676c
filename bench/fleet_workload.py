"""The fleet bench's workload: one seeded list of timed requests that both policies replay alike."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.common import png_data_url, wav_b64

CLASSES = ("text", "image", "image+audio")
MODEL = "small"
_VOCABULARY = (
    "answer briefly and politely cite the relevant clause when a customer asks about orders refunds shipping "
    "invoices warranty returns accounts passwords never reveal internal notes escalate billing disputes to a human "
    "agent use metric units prefer plain language summarise long documents in three bullet points"
)


@dataclass(frozen=True)
class FleetSizes:
    requests: int = 120
    # About 60% of the two replicas: a request alone takes about 1 s on them (2 cores, shared with the gateway).
    rate: float = 1.2  # Poisson arrivals per second
    max_tokens: int = 24
    tenants: int = 4
    prompts_per_tenant: int = 2
    # About 210 tokens: text requests share one full 128-token KV block of it, and the image that follows it
    # completes the second block, which only that image's repeats share.
    prompt_words: int = 180
    mix: tuple[float, float, float] = (0.7, 0.2, 0.1)  # text, image, image+audio
    repeat_fraction: float = 0.3
    seed: int = 2026
    model: str = MODEL  # the pool every request names


# Near what two replicas take on this machine, 600 requests a round, and 48 shared prefixes of about 900 tokens:
# more than one replica's shrunken KV cache holds (see bench/fleet.py), half of them with room to spare.
FULL = FleetSizes(requests=600, rate=2.5, tenants=12, prompts_per_tenant=4, prompt_words=800)
# Every class and a couple of repeats even in 12 requests.
SMOKE = FleetSizes(requests=12, rate=1.5, max_tokens=8, tenants=2, prompts_per_tenant=1, mix=(0.5, 0.3, 0.2))


@dataclass(frozen=True)
class Job:
    """One request of the workload: when it arrives (s after the start), its class, tenant and media."""

    index: int
    at_s: float
    kind: str
    tenant: int
    prompt: int
    image: int | None = None  # PNG seed
    audio: int | None = None  # tone number: 220 Hz + 7 Hz per number
    repeat: bool = False


def workload(sizes: FleetSizes) -> list[Job]:
    """The seeded arrival schedule and request list, identical for both policies. Media requests repeat an
    earlier medium of their class whenever the repeats so far fall short of `repeat_fraction` of them. A repeat
    keeps its original's tenant, system prompt and media (a follow-up in the same conversation)."""
    rng = random.Random(sizes.seed)
    jobs: list[Job] = []
    originals: dict[str, list[Job]] = {"image": [], "image+audio": []}
    at, fresh, media, repeats = 0.0, 0, 0, 0
    for i in range(sizes.requests):
        at += rng.expovariate(sizes.rate)
        kind = rng.choices(CLASSES, weights=sizes.mix)[0]
        tenant, prompt = rng.randrange(sizes.tenants), rng.randrange(sizes.prompts_per_tenant)
        media += kind != "text"
        if kind == "text":
            jobs.append(Job(i, at, kind, tenant, prompt))
        elif originals[kind] and repeats + 1 <= sizes.repeat_fraction * media:
            repeats += 1
            jobs.append(replace(rng.choice(originals[kind]), index=i, at_s=at, repeat=True))
        else:
            fresh += 1
            job = Job(i, at, kind, tenant, prompt, image=fresh, audio=fresh if kind == "image+audio" else None)
            originals[kind].append(job)
            jobs.append(job)
    return jobs


def system_prompt(sizes: FleetSizes, tenant: int, prompt: int) -> str:
    rng = random.Random(f"fleet-prompt/{tenant}/{prompt}")
    words = _VOCABULARY.split()
    rules = " ".join(rng.choice(words) for _ in range(sizes.prompt_words))
    return f"You are the assistant of tenant {tenant}, house style {prompt}. House rules: {rules}."


@functools.cache
def _image(seed: int) -> str:
    return png_data_url(50_000 + seed)


@functools.cache
def _audio(tone: int) -> str:
    return wav_b64(2.0, freq=220.0 + 7.0 * tone)


def request_body(job: Job, sizes: FleetSizes) -> dict[str, Any]:
    """Media come first in the user turn, so a repeat's prefix (system prompt, then media) can be cached."""
    question = f"Question {job.index}: what should I check first?"
    user: str | list[dict[str, Any]] = question
    if job.image is not None:
        user = [{"type": "image_url", "image_url": {"url": _image(job.image)}}]
        if job.audio is not None:
            user.append({"type": "input_audio", "input_audio": {"data": _audio(job.audio), "format": "wav"}})
        user.append({"type": "text", "text": question})
    return {
        "model": sizes.model,
        "messages": [
            {"role": "system", "content": system_prompt(sizes, job.tenant, job.prompt)},
            {"role": "user", "content": user},
        ],
        "max_tokens": sizes.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }


def warmup_jobs(sizes: FleetSizes) -> list[Job]:
    """One text request per (tenant, system prompt), the first of its prefix in the phase, then one of each
    media class on media of their own: encoders and both replicas warm, in the same order for both policies."""
    texts = [Job(-1, 0.0, "text", t, p) for t in range(sizes.tenants) for p in range(sizes.prompts_per_tenant)]
    media = [Job(-1, 0.0, "image", 0, 0, image=10_000), Job(-1, 0.0, "image+audio", 0, 0, image=10_001, audio=999)]
    return [*texts, *media]


def describe(sizes: FleetSizes, jobs: Sequence[Job]) -> dict[str, Any]:
    return {
        "requests": len(jobs),
        "rate_per_s": sizes.rate,
        "schedule_s": round(jobs[-1].at_s, 1),
        "seed": sizes.seed,
        "max_tokens": sizes.max_tokens,
        "tenants": sizes.tenants,
        "system_prompts": sizes.tenants * sizes.prompts_per_tenant,
        "by_class": {k: sum(1 for j in jobs if j.kind == k) for k in CLASSES},
        "media_repeats": sum(1 for j in jobs if j.repeat),
        "warmup_requests_per_phase": len(warmup_jobs(sizes)),
    }
