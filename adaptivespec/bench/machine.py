"""What every bench JSON records of the machine it ran on: enough to compare runs across CPU
classes (capability, native bf16) and thread counts."""

from __future__ import annotations

import platform
import sys
from typing import Any

import torch
import transformers

from adaptivespec.engine.hardware import hardware_key, native_cpu_bf16, resolve_device, usable_cpus


def machine(key: str | None = None) -> dict[str, Any]:
    """`key`: the runner's hardware key, when a runner was loaded; else this machine's."""
    return {
        "hardware_key": key or hardware_key(resolve_device("auto")),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": native_cpu_bf16(),
        "threads": torch.get_num_threads(),
        "usable_cpus": usable_cpus(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "argv": sys.argv[1:],
    }
