"""Engines: the interface serving needs, the in-process vLLM engine with its I/O and patches, the remote vLLM
engine with its wire format, and the endpoint picker over a pool's replicas."""
