"""Where an encoder tower runs: the torch device and compute dtype, checked against this machine at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENCODER_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class EncoderPlacement:
    """Where an encoder tower runs (a torch device string) and the dtype it computes in."""

    device: str
    dtype: str

    @classmethod
    def resolve(
        cls, device: str = "auto", dtype: str = "float32", *, cuda_devices: int | None = None
    ) -> EncoderPlacement:
        """Checks a configured placement; `auto` picks the first GPU when there is one, else the CPU.

        `cuda_devices` is how many GPUs torch sees (default: ask torch). Refuses, with a message naming the
        setting, a device that does not exist here and float16 on the CPU, where it is slow and loses range.
        """
        if dtype not in ENCODER_DTYPES:
            raise ValueError(f"encoder_dtype must be one of {', '.join(ENCODER_DTYPES)}, not {dtype!r}")
        if cuda_devices is None:
            cuda_devices = _cuda_device_count()
        resolved = _resolve_device(device, cuda_devices)
        if dtype == "float16" and resolved == "cpu":
            how = " ('auto' found no CUDA device)" if device == "auto" else ""
            raise ValueError(
                f"encoder_dtype float16 needs a GPU, but encoder_device {device!r} is the CPU{how}; "
                "use float32 (exact) or bfloat16 on the CPU"
            )
        return cls(resolved, dtype)

    @property
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype)


def _cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _resolve_device(device: str, cuda_devices: int) -> str:
    if device == "auto":
        return "cuda:0" if cuda_devices else "cpu"
    kind, _, index = device.partition(":")
    if kind == "cpu" and not index:
        return "cpu"
    if kind == "cuda" and (not index or index.isdigit()):
        ordinal = int(index or 0)
        if ordinal >= cuda_devices:
            seen = f"{cuda_devices} CUDA device(s)" if cuda_devices else "no CUDA device"
            raise ValueError(f"encoder_device {device!r} is not available: torch sees {seen}")
        return f"cuda:{ordinal}"
    raise ValueError(f"encoder_device must be 'auto', 'cpu', 'cuda' or 'cuda:N', not {device!r}")
