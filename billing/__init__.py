"""Prices per model and modality, costs, the billing outbox and its Stripe worker, and webhooks."""
