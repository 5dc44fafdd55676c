"""The audit log as the API and the console read it (the writer and the table live in `db.audit`)."""

from __future__ import annotations

from db.audit import AuditPage, audit_page, entry_summary

__all__ = ["AuditPage", "audit_page", "entry_summary"]
