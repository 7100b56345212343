"""Runtime "auto": OpenVINO runs the target's forwards on a CPU where the rest of the
configuration runs there and the package is installed; torch everywhere else."""

from __future__ import annotations

import pytest
import torch

from adaptivespec.config import ModelConfig
from adaptivespec.engine.runtime_choice import choose_runtime

CPU, F32 = torch.device("cpu"), torch.float32
ABLE = {"device": CPU, "dtype": F32, "compile": "off", "available": True}


def test_auto_takes_openvino_where_everything_runs_there() -> None:
    assert ModelConfig().runtime == "auto"  # what serve runs unless told
    assert choose_runtime("auto", **ABLE).runtime == "openvino"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"device": torch.device("cuda")}, "the device is cuda"),
        ({"dtype": torch.bfloat16}, "not bfloat16"),
        ({"compile": "on"}, "compiled step"),
        ({"available": False}, "pip install"),
    ],
)
def test_auto_keeps_torch_and_says_why(change: dict[str, object], why: str) -> None:
    choice = choose_runtime("auto", **(ABLE | change))  # type: ignore[arg-type]
    assert choice.runtime == "torch" and why in choice.why


def test_an_explicit_runtime_is_taken_as_asked() -> None:
    assert choose_runtime("torch", **ABLE).runtime == "torch"  # type: ignore[arg-type]
    unable = ABLE | {"available": False}
    assert choose_runtime("openvino", **unable).runtime == "openvino"  # type: ignore[arg-type]
