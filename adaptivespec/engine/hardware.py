"""What this machine can run: device, native number formats, and the key learned tables are filed under."""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path

import torch

from adaptivespec.errors import ModelLoadError

log = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# CPU instruction sets with bf16 arithmetic; without them torch emulates bf16, orders of
# magnitude slower.
_NATIVE_BF16_CHECKS = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")


def native_cpu_bf16() -> bool:
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in _NATIVE_BF16_CHECKS)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(
            "device 'cuda' was asked for, but torch sees no CUDA GPU; use --device cpu or auto"
        )
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    dtype = _DTYPES[name]
    if device.type == "cpu" and dtype == torch.bfloat16 and not native_cpu_bf16():
        log.warning(
            "this CPU (%s) has no native bf16: bf16 matmuls run far slower than float32 here; "
            "use --dtype float32 (or auto)",
            torch.backends.cpu.get_cpu_capability(),
        )
    return dtype


def usable_cpu_ids() -> frozenset[int]:
    """The CPUs this process may run on (its affinity mask, as a container or taskset limits it)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call on this platform
        return frozenset(range(os.cpu_count() or 1))


def usable_cpus() -> int:
    return len(usable_cpu_ids())


def set_threads(threads: int) -> int:
    """Sets torch's intra-op threads (0 = `usable_cpus()`), logs and returns the number."""
    count = threads or usable_cpus()
    torch.set_num_threads(count)
    log.info(
        "torch threads: %d (of %d usable CPUs; capability %s)",
        count,
        usable_cpus(),
        torch.backends.cpu.get_cpu_capability(),
    )
    return count


def hardware_key(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{_cpu_model_name()}:{torch.get_num_threads()}"


def _cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
