"""Tenants, API keys, quotas and rate limits, and metering."""
