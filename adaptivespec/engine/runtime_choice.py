"""Which runtime runs the target's forwards when the configuration leaves it open ("auto").

On a CPU, OpenVINO's forwards are the faster by far (docs/results.md, the openvino runtime's
rows against the torch runtime's), so "auto" takes them wherever everything else the
configuration asks for runs there too: a CPU, float32, no compiled step, and the `openvino`
package installed. An EAGLE-3 head runs on either (OpenVINO's passes return the states it
reads). Anywhere else torch runs them: the GPU path, and whatever OpenVINO cannot run.
An explicit "torch" or "openvino" is taken as asked (the configuration
refuses an "openvino" that cannot run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Runtime = Literal["torch", "openvino"]

INSTALL_HINT = "pip install 'adaptivespec[openvino]' (or -e '.[openvino]') lets them run on OpenVINO"


@dataclass(frozen=True, slots=True)
class RuntimeChoice:
    runtime: Runtime
    why: str  # one line for the start-up log: what runs the forwards, and why


def choose_runtime(
    asked: str, *, device: torch.device, dtype: torch.dtype, compile: str, available: bool
) -> RuntimeChoice:
    """`available`: the `openvino` package imports."""
    if asked == "openvino":
        return RuntimeChoice("openvino", "the target's forwards run on OpenVINO (--runtime openvino)")
    if asked == "torch":
        return RuntimeChoice("torch", "the target's forwards run on torch (--runtime torch)")
    reason = _torch_because(device, dtype, compile, available)
    if reason is None:
        return RuntimeChoice("openvino", "the target's forwards run on OpenVINO (runtime auto, on a CPU)")
    return RuntimeChoice("torch", f"the target's forwards run on torch (runtime auto: {reason})")


def _torch_because(device: torch.device, dtype: torch.dtype, compile: str, available: bool) -> str | None:
    if device.type != "cpu":
        return f"the device is {device.type}"
    if dtype != torch.float32:
        return f"OpenVINO runs float32 here, not {str(dtype).removeprefix('torch.')}"
    if compile == "on":
        return "the compiled step is torch's"
    if not available:
        return f"openvino is not installed; {INSTALL_HINT}"
    return None
