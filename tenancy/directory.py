"""Tenants and API keys: creation, key issue and revocation, and resolving a presented key to a principal.

Keys look like `sk-tsr-<8 hex>-<secret>`. Only HMAC-SHA256(deployment secret, key) is stored, beside the
visible `sk-tsr-<8 hex>` prefix; lookups go by the hash and the stored hash is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from db.audit import SYSTEM, changed, write_audit
from db.models import ApiKey, Tenant, TenantQuota
from serving.errors import Conflict, InvalidRequest, NotFound
from serving.routing import ROUTING_POLICIES

__all__ = ["ApiKey", "Directory", "IssuedKey", "Principal", "Tenant", "TenantQuota", "key_summary", "tenant_summary"]

KEY_PREFIX = "sk-tsr-"


# How a tenant's answers are checked for grounding (grounding.guardrail implements them).
GROUNDING_POLICIES = ("off", "score", "flag", "block")
GROUNDING_EVIDENCE = ("label_head", "judge", "both")
MAX_RETENTION_DAYS = 3650  # stored responses are kept at most ten years


@dataclass(frozen=True)
class Principal:
    key_id: str
    tenant_id: str | None
    tenant_name: str | None
    is_admin: bool
    allowed_models: frozenset[str] | None
    quota: TenantQuota | None
    expires_at: datetime | None = None
    key_prefix: str | None = None  # the key's visible prefix (`sk-tsr-1a2b3c4d`); None for the static admin key

    def may_use(self, model: str) -> bool:
        return self.allowed_models is None or model in self.allowed_models

    def actor(self, via: str) -> str:
        """Who made a change, for the audit log: `via` (api, console) and the key's prefix."""
        return f"{via}:{self.key_prefix or 'static admin key'}"


@dataclass(frozen=True)
class IssuedKey:
    key: str  # shown once
    key_id: str
    prefix: str


def _quota_fields(quota: TenantQuota) -> dict[str, Any]:
    return quota.model_dump(exclude={"tenant_id"})


def _key_fields(row: ApiKey) -> dict[str, Any]:
    """A key as the audit log keeps it: never its hash."""
    return row.model_dump(include={"prefix", "tenant_id", "name", "is_admin", "allowed_models", "expires_at"})


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(moment: datetime | None) -> datetime | None:
    return None if moment is None else (moment if moment.tzinfo else moment.replace(tzinfo=UTC))


class Directory:
    """Keys and tenants. Resolved keys are cached for `cache_ttl_s` (unknown keys for `miss_ttl_s`), in an LRU
    of at most `cache_entries`, so a flood of bad keys costs bounded memory.

    Every change to a key, a tenant's status or its quota empties the cache and is announced to the other
    gateways through `announce` (see `tenancy.revocations`), which empty theirs within a poll interval. A key
    read from the database while the cache was being emptied is not cached, so a revocation cannot be
    undone by a lookup that raced it."""

    def __init__(
        self,
        db: Engine,
        secret: str,
        *,
        cache_ttl_s: float = 5.0,
        miss_ttl_s: float = 1.0,
        cache_entries: int = 10_000,
    ) -> None:
        self._db = db
        self._secret = secret.encode()
        self._cache_ttl = cache_ttl_s
        self._miss_ttl = miss_ttl_s
        self._cache_entries = cache_entries
        self._cache: OrderedDict[str, tuple[float, Principal | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = 0  # bumped by every `forget`
        self.announce: Callable[[], None] | None = None  # tells the other gateways (set by a change feed)

    def hash_key(self, key: str) -> str:
        return hmac.new(self._secret, key.encode(), hashlib.sha256).hexdigest()

    # -- tenants ---------------------------------------------------------------------------------------

    def create_tenant(
        self,
        name: str,
        *,
        tokens_per_minute: int = 100_000,
        concurrency: int = 16,
        monthly_token_budget: int | None = None,
        actor: str = SYSTEM,
    ) -> Tenant:
        if not name or len(name) > 128:
            raise InvalidRequest("a tenant name must be 1-128 characters", code="invalid_tenant_name")
        with Session(self._db, expire_on_commit=False) as s:
            if s.exec(select(Tenant).where(Tenant.name == name)).first() is not None:
                raise Conflict(f"tenant '{name}' already exists", code="tenant_exists")
            tenant = Tenant(id=str(uuid.uuid4()), name=name)
            s.add(tenant)
            quota = TenantQuota(
                tenant_id=tenant.id,
                tokens_per_minute=tokens_per_minute,
                concurrent_requests=concurrency,
                monthly_token_budget=monthly_token_budget,
            )
            s.add(quota)
            write_audit(s, actor, "tenant.create", tenant.id, None, {"name": name, **_quota_fields(quota)})
            s.commit()
            s.refresh(tenant)
            return tenant

    def tenant(self, name_or_id: str) -> Tenant:
        with Session(self._db, expire_on_commit=False) as s:
            found = s.get(Tenant, name_or_id) or s.exec(select(Tenant).where(Tenant.name == name_or_id)).first()
            if found is None:
                raise NotFound(f"tenant '{name_or_id}' not found", code="tenant_not_found")
            return found

    def tenants(self) -> list[tuple[Tenant, TenantQuota | None]]:
        with Session(self._db, expire_on_commit=False) as s:
            return [(t, s.get(TenantQuota, t.id)) for t in s.exec(select(Tenant).order_by(Tenant.name))]

    def quota(self, tenant_id: str) -> TenantQuota | None:
        with Session(self._db, expire_on_commit=False) as s:
            return s.get(TenantQuota, tenant_id)

    def set_status(self, tenant_id: str, status: str, *, actor: str = SYSTEM) -> Tenant:
        if status not in ("active", "suspended"):
            raise InvalidRequest("status must be active or suspended", code="invalid_status")
        with Session(self._db, expire_on_commit=False) as s:
            tenant = s.get(Tenant, tenant_id)
            if tenant is None:
                raise NotFound("tenant not found", code="tenant_not_found")
            write_audit(s, actor, "tenant.status", tenant_id, {"status": tenant.status}, {"status": status})
            tenant.status = status
            s.add(tenant)
            s.commit()
            s.refresh(tenant)
        self.forget()
        return tenant

    def set_quota(
        self, tenant_id: str, *, actor: str = SYSTEM, **fields: int | float | str | bool | None
    ) -> TenantQuota:
        allowed = {
            "tokens_per_minute",
            "concurrent_requests",
            "monthly_token_budget",
            "monthly_cost_budget_micros",
            "tier",
            "grounding_policy",
            "grounding_threshold",
            "grounding_evidence",
            "store_responses",
            "response_retention_days",
            "routing_policy",
        }
        unknown = set(fields) - allowed
        if unknown:
            raise InvalidRequest(f"unknown quota fields {sorted(unknown)}", code="invalid_quota")
        for name, choices in (
            ("grounding_policy", GROUNDING_POLICIES),
            ("grounding_evidence", GROUNDING_EVIDENCE),
            ("routing_policy", ROUTING_POLICIES),
        ):
            if name in fields and fields[name] not in choices:
                raise InvalidRequest(f"{name} must be one of {', '.join(choices)}", code="invalid_quota")
        retention = fields.get("response_retention_days")
        if retention is not None and not (isinstance(retention, int) and 1 <= retention <= MAX_RETENTION_DAYS):
            raise InvalidRequest(f"response_retention_days must lie in [1, {MAX_RETENTION_DAYS}]", code="invalid_quota")
        threshold = fields.get("grounding_threshold")
        if threshold is not None and not (isinstance(threshold, int | float) and 0.0 <= float(threshold) <= 1.0):
            raise InvalidRequest("grounding_threshold must be between 0 and 1", code="invalid_quota")
        with Session(self._db, expire_on_commit=False) as s:
            quota = s.get(TenantQuota, tenant_id)
            if quota is None:
                raise NotFound("tenant not found", code="tenant_not_found")
            earlier = _quota_fields(quota)
            for key, value in fields.items():
                if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                    raise InvalidRequest(f"{key} must not be negative", code="invalid_quota")
                setattr(quota, key, value)
            before, after = changed(earlier, _quota_fields(quota))
            if after:  # a change that changes nothing leaves no row
                write_audit(s, actor, "quota.update", tenant_id, before, after)
            s.add(quota)
            s.commit()
            s.refresh(quota)
        self.forget()
        return quota

    # -- keys ------------------------------------------------------------------------------------------

    def issue_key(
        self,
        tenant_id: str | None,
        *,
        name: str = "",
        admin: bool = False,
        allowed_models: list[str] | None = None,
        expires_at: datetime | None = None,
        actor: str = SYSTEM,
    ) -> IssuedKey:
        visible = f"{KEY_PREFIX}{secrets.token_hex(4)}"
        key = f"{visible}-{secrets.token_urlsafe(24)}"
        row = ApiKey(
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            prefix=visible,
            key_hash=self.hash_key(key),
            name=name,
            is_admin=admin,
            expires_at=expires_at,
            allowed_models=",".join(allowed_models) if allowed_models else None,
        )
        with Session(self._db, expire_on_commit=False) as s:
            if tenant_id is not None and s.get(Tenant, tenant_id) is None:
                raise NotFound("tenant not found", code="tenant_not_found")
            s.add(row)
            write_audit(s, actor, "key.issue", row.id, None, _key_fields(row))
            s.commit()
        return IssuedKey(key, row.id, visible)

    def register_key(self, key: str, tenant_id: str, *, name: str) -> str:
        """Adopt a key chosen by the operator (e.g. `TESSERA_API_KEY`); idempotent. Returns its id."""
        digest = self.hash_key(key)
        with Session(self._db, expire_on_commit=False) as s:
            row = s.exec(select(ApiKey).where(ApiKey.key_hash == digest)).first()
            if row is not None:
                return row.id
            row = ApiKey(id=str(uuid.uuid4()), tenant_id=tenant_id, prefix=key[:12], key_hash=digest, name=name)
            s.add(row)
            s.commit()
            return row.id

    def keys(self, tenant_id: str | None) -> list[ApiKey]:
        with Session(self._db, expire_on_commit=False) as s:
            query = select(ApiKey).order_by(col(ApiKey.created_at))
            if tenant_id is not None:
                query = query.where(ApiKey.tenant_id == tenant_id)
            return list(s.exec(query))

    def revoke_key(self, key_id: str, *, tenant_id: str | None = None, actor: str = SYSTEM) -> ApiKey:
        with Session(self._db, expire_on_commit=False) as s:
            row = s.get(ApiKey, key_id)
            if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
                raise NotFound("key not found", code="key_not_found")
            if row.revoked_at is None:
                row.revoked_at = _now()
                write_audit(s, actor, "key.revoke", key_id, {"revoked_at": None}, {"revoked_at": row.revoked_at})
            s.add(row)
            s.commit()
            s.refresh(row)
        self.forget()
        return row

    def cached(self, key: str) -> tuple[bool, Principal | None]:
        """(found in the cache, principal) without touching the database: safe on the event loop."""
        with self._lock:
            hit = self._cache.get(self.hash_key(key))
        if hit is not None and hit[0] > time.monotonic():
            return True, hit[1]
        return False, None

    def resolve(self, key: str) -> Principal | None:
        """The principal behind a presented key, or None; cached briefly so the hot path rarely hits the DB."""
        if not key or len(key) > 256:
            return None
        digest = self.hash_key(key)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(digest)
            if hit is not None and hit[0] > now:
                return hit[1]
            generation = self._generation
        principal = self._load(digest)
        ttl = self._cache_ttl if principal is not None else self._miss_ttl
        with self._lock:
            if generation != self._generation:  # a change landed while we read: this row may predate it
                return principal
            self._cache[digest] = (now + ttl, principal)
            self._cache.move_to_end(digest)
            while len(self._cache) > self._cache_entries:
                self._cache.popitem(last=False)
        return principal

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    def by_key_id(self, key_id: str) -> Principal | None:
        """The principal of a key known by id (a console session), with the same checks as `resolve`."""
        with Session(self._db, expire_on_commit=False) as s:
            row = s.get(ApiKey, key_id)
            return self._principal(s, row) if row is not None else None

    def _load(self, digest: str) -> Principal | None:
        with Session(self._db, expire_on_commit=False) as s:
            row = s.exec(select(ApiKey).where(ApiKey.key_hash == digest)).first()
            if row is None or not hmac.compare_digest(row.key_hash, digest):
                return None
            return self._principal(s, row)

    def _principal(self, s: Session, row: ApiKey) -> Principal | None:
        if row.revoked_at is not None:
            return None
        expires = _aware(row.expires_at)
        if expires is not None and expires <= _now():
            return None
        tenant = s.get(Tenant, row.tenant_id) if row.tenant_id else None
        if tenant is not None and tenant.status != "active":
            return None
        quota = s.get(TenantQuota, row.tenant_id) if row.tenant_id else None
        models = frozenset(m for m in (row.allowed_models or "").split(",") if m) or None
        name = tenant.name if tenant else None
        return Principal(row.id, row.tenant_id, name, row.is_admin, models, quota, expires, row.prefix)

    def forget(self, *, announce: bool = True) -> None:
        """Empty the resolved-key cache after a change, and tell the other gateways to empty theirs."""
        with self._lock:
            self._cache.clear()
            self._generation += 1
        if announce and self.announce is not None:
            self.announce()

    def retire_keys_named(self, name: str, tenant_id: str, keep_id: str) -> int:
        """Revoke the tenant's other keys called `name`: an operator key that was replaced stops working."""
        with Session(self._db, expire_on_commit=False) as s:
            rows = s.exec(
                select(ApiKey).where(
                    ApiKey.tenant_id == tenant_id,
                    ApiKey.name == name,
                    ApiKey.id != keep_id,
                    col(ApiKey.revoked_at).is_(None),
                )
            ).all()
            for row in rows:
                row.revoked_at = _now()
                s.add(row)
            s.commit()
        if rows:
            self.forget()
        return len(rows)


def tenant_summary(tenant: Tenant, quota: TenantQuota | None) -> dict[str, Any]:
    """A tenant and its quota as the admin API shows them."""
    limits = quota.model_dump(exclude={"tenant_id"}) if quota else None
    return {
        "id": tenant.id,
        "name": tenant.name,
        "status": tenant.status,
        "created_at": tenant.created_at.isoformat(),
        "quota": limits,
    }


def key_summary(key: ApiKey) -> dict[str, Any]:
    """A key as the admin API shows it: never its secret or hash."""
    return {
        "id": key.id,
        "tenant_id": key.tenant_id,
        "prefix": key.prefix,
        "name": key.name,
        "allowed_models": key.allowed_models.split(",") if key.allowed_models else None,
        "expires_at": key.expires_at.isoformat() if key.expires_at else None,
        "revoked": key.revoked_at is not None,
        "created_at": key.created_at.isoformat(),
    }
