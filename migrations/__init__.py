"""Alembic migrations of Tessera's schema, one revision per change."""
