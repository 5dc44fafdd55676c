"""The caller policy: what serving asks of whoever sends a request. Serving defines it; tenancy implements it.

Serving knows nothing of tenants, keys or budgets. It asks the caller four things, in this order, and the
lease (`serving.completion`) gives back what it took on every exit:
1. may this caller use the chosen model (`check_model`, before any media is fetched when the model is named);
2. is there room for another request at all (`precheck`: a read, before any media is fetched or any prompt
   is tokenized, so a caller at its limits costs the gateway almost nothing);
3. which prefix-cache salt keeps its KV blocks apart from other callers' (`cache_salt`);
4. a reservation of the request's worst case (`reserve`: its prompt tokens by modality, as estimated before the
   media is decoded, and every choice's `max_tokens`), settled to what it used when it ends; the caller prices
   both, so a spending budget is held like a token budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from serving.record import TokenUsage


@dataclass(frozen=True)
class CallerIdentity:
    """Who a completion is billed to, and how its answers are to be checked; it travels on the completion record."""

    tenant_id: str | None = None
    key_id: str | None = None
    # The caller's grounding guardrail (see grounding.guardrail): off | score | flag | block, and the score an
    # answer must reach to pass. Serving only carries them.
    grounding_policy: str = "score"
    grounding_threshold: float = 0.9
    grounding_evidence: str = "label_head"  # label_head | judge | both: what checks the claims
    # interactive | batch: the class the request is billed in (a batch line at its model's batch price).
    priority: str = "interactive"
    # What `model: "auto"` does for this caller (serving.routing.ROUTING_POLICIES).
    routing_policy: str = "heuristic"
    # The request id the caller fixed in advance (a batch line's, so that a line run again after a gateway died is
    # the same request to metering; a grounding judge's question, named after the answer it checks); None: the
    # lease makes one.
    request_id: str | None = None

    @property
    def batch_line(self) -> bool:
        """A batch line's request, whose usage its batch settles (tenancy.usage_log)."""
        return self.priority == "batch" and self.request_id is not None


class QuotaHold(Protocol):
    """A caller's reservation for one request, held by the lease until the request ends."""

    @property
    def limits(self) -> dict[str, str]:
        """Rate-limit counters to show the client (e.g. `x-ratelimit-remaining-tokens`)."""
        ...

    async def settle(self, used: TokenUsage) -> None:
        """Reconcile the reservation to what was used (nothing when refused before the engine) and free it."""
        ...


class CallerPolicy(Protocol):
    @property
    def identity(self) -> CallerIdentity: ...

    @property
    def cache_salt(self) -> str | None: ...

    def check_model(self, model: str) -> None:
        """Raise `PermissionDenied` when this caller may not use `model`."""
        ...

    async def precheck(self) -> None:
        """Raise `RateLimited` when the caller has no request slot or token left right now; reserves nothing
        (the reservation later is the binding check)."""
        ...

    async def reserve(self, model: str, worst: TokenUsage) -> QuotaHold:
        """Reserve the worst case `worst` on `model`, or raise `RateLimited` / `QuotaExceeded`."""
        ...
