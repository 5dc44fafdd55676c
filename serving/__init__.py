"""The inference pipeline: media ingest, encoder pools, cache, fusion, admission, routing, engines."""
