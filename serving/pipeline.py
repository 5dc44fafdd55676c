"""Request planning: check the messages, probe media headers, pick a pool, and render the prompt once.

Nothing here decodes media or holds capacity; `serving.service` calls these steps in order and acquires the
caller's reservation and the pool's KV ticket between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from serving.encoders.cache import CacheScope
from serving.encoders.counting import AUDIO_SAMPLE_RATE
from serving.errors import EngineUnavailable
from serving.ingest import MediaIngest, MessageLike, MessagePlan, ProbedMedia, plan_messages
from serving.pools import ModelPool, PoolRegistry
from serving.prompt_router import CascadeGate
from serving.routing import AUTO, DEFAULT_ROUTING_POLICY, PoolView, RouteRequest, RoutingPolicy, route


@dataclass(frozen=True)
class RenderedPrompt:
    """The chat template applied to a plan, with its token count, for one prompt format (template and
    tokenizer): pools sharing a format share the rendering."""

    text: str
    token_ids: tuple[int, ...]  # the rendered text tokenized, one token per media placeholder
    prompt_format: str

    @property
    def template_tokens(self) -> int:
        return len(self.token_ids)


class Pipeline:
    def __init__(
        self,
        pools: PoolRegistry,
        ingest: MediaIngest,
        *,
        max_images: int,
        pinned_media: set[str] | None = None,
        shared_cache_salt: str | None = None,
        routing: RoutingPolicy | None = None,
    ) -> None:
        self.pools = pools
        self._ingest = ingest
        self._max_images = max_images
        self._pinned = pinned_media or set()
        self._shared_salt = shared_cache_salt
        self._routing = routing or RoutingPolicy()

    @property
    def cascade_gate(self) -> CascadeGate | None:
        """The `cascade` policy's fitted gate, where the loaded router carries one (serving.prompt_router)."""
        router = self._routing.router
        return router.cascade if router is not None else None

    def plan(self, messages: Sequence[MessageLike]) -> MessagePlan:
        return plan_messages(messages, max_images=self._max_images)

    def named_pool(self, model: str, plan: MessagePlan) -> tuple[ModelPool, str] | None:
        """The pool a request names (checked against its modalities), or None for `auto`."""
        if model == AUTO:
            return None
        self.pools.require_kind(model, "chat")
        return self._route(RouteRequest(model, plan.modalities, 0, ""))

    async def auto_pool(
        self,
        plan: MessagePlan,
        prompt: RenderedPrompt,
        probed: list[ProbedMedia],
        *,
        policy: str = DEFAULT_ROUTING_POLICY,
        streamed: bool = False,
    ) -> tuple[ModelPool, str]:
        """`auto` under the caller's routing `policy` (serving.routing). Media are counted by the first pool that
        takes them all (pools of different families count a medium differently; routing needs its size, not its
        exact bill)."""
        counting = next((p for p in self.pools.pools if plan.modalities <= set(p.modalities)), None)
        estimate = await self.estimate(prompt, probed, counting)
        text = " ".join(plan.user_texts())
        return self._route(RouteRequest(AUTO, plan.modalities, estimate, text, policy=policy, streamed=streamed))

    def _route(self, request: RouteRequest) -> tuple[ModelPool, str]:
        name, reason = route(request, self._views(), self._routing)
        pool = self.pools.get(name)
        assert pool is not None
        return pool, reason

    def first_pool(self) -> ModelPool:
        return self.pools.pools[0]

    async def probe(self, plan: MessagePlan) -> list[ProbedMedia]:
        return await self._ingest.probe(plan)

    async def render(
        self, pool: ModelPool, plan: MessagePlan, tools: list[dict[str, Any]] | None = None
    ) -> RenderedPrompt:
        """Apply the pool's chat template and count its tokens on a worker thread, never on the event loop."""
        return await asyncio.to_thread(_render, pool, plan, tools)

    @staticmethod
    async def estimate(prompt: RenderedPrompt, probed: list[ProbedMedia], pool: ModelPool | None = None) -> int:
        """Fused prompt tokens from the template and the media headers, before any media is decoded."""
        return sum((await Pipeline.estimate_parts(prompt, probed, pool)).values())

    @staticmethod
    async def estimate_parts(
        prompt: RenderedPrompt, probed: list[ProbedMedia], pool: ModelPool | None = None
    ) -> dict[str, int]:
        """The estimate by modality: text (the template, less one placeholder per medium), image and audio, each
        medium counted by the pool's engine's own processor at its probed size."""
        parts = {"text": prompt.template_tokens - len(probed), "image": 0, "audio": 0}
        if pool is None:
            return parts
        for p in probed:
            if p.item.kind == "image":
                parts["image"] += await pool.media_tokens("image", (p.width, p.height))
            else:
                parts["audio"] += await pool.media_tokens("audio", (round(p.seconds * AUDIO_SAMPLE_RATE),))
        return parts

    def cache_salt(
        self,
        caller_salt: str | None,
        media_hashes: set[str],
        plan: MessagePlan,
        tools: list[dict[str, Any]] | None = None,
    ) -> str | None:
        """Requests whose media are all pinned share one salt, so their prefix is cached once for everyone; but
        only when the prompt opens with a pinned medium, with no tools: a system prompt, tool definitions (which
        templates render into the system block), earlier turns or text before the first medium are the caller's
        own, and a prefix-cache hit on them would tell another tenant what they were. (What follows the pinned
        media is shared too: a tenant can tell that someone asked the very same thing about a pinned medium.)"""
        shareable = bool(media_hashes) and media_hashes <= self._pinned and not tools and plan.opens_with_media()
        if self._shared_salt and shareable:
            return self._shared_salt
        return caller_salt

    def cache_scope(self, caller_salt: str | None) -> CacheScope:
        """The caller's own embedding-cache entries, plus the pinned media everyone shares."""
        return CacheScope(caller_salt, frozenset(self._pinned))

    def _views(self) -> list[PoolView]:
        return [PoolView(p.name, p.aliases, p.modalities, p.strength, _headroom(p)) for p in self.pools.pools]


def require_healthy(pool: ModelPool) -> None:
    if not pool.engine.is_healthy():
        raise EngineUnavailable(f"the engine of model '{pool.name}' is not running")


def _render(pool: ModelPool, plan: MessagePlan, tools: list[dict[str, Any]] | None) -> RenderedPrompt:
    text = pool.render_prompt(plan.messages, tools)
    with pool.tokenizer_lock:
        ids = pool.tokenizer().encode(text, add_special_tokens=False)
    return RenderedPrompt(text, tuple(ids), pool.prompt_format)


def _headroom(pool: ModelPool) -> Callable[[], float]:
    return lambda: pool.admission.free_fraction if pool.engine.is_healthy() else 0.0
