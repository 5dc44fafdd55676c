"""Encoders: the vision and audio pools (micro-batched), where they run, the embedding cache by content hash,
the encoding step of a request, tower weights I/O, and what a trained tower detects."""
