"""Tessera's benchmarks: `tessera bench pipeline|latency|tenancy --json PATH [--smoke]` (see bench/cli.py)."""
