"""Hardware and model descriptions for the simulator: presets from published figures, or JSON files.

Hardware presets use the vendors' published memory bandwidth and dense (non-sparse) BF16
tensor throughput. Model presets use the published Hugging Face `config.json` values.
The overhead fields are not vendor figures: see docs/simulator.md for where each comes from.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from adaptivespec.errors import ConfigError

S = TypeVar("S", "HardwareSpec", "ModelSpec")


def _positive(spec: object, *names: str) -> None:
    for name in names:
        value = getattr(spec, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ConfigError(f"{type(spec).__name__}.{name} must be a number > 0, got {value!r}")


def _non_negative(spec: object, *names: str) -> None:
    for name in names:
        value = getattr(spec, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
            raise ConfigError(f"{type(spec).__name__}.{name} must be a number >= 0, got {value!r}")


def _fraction(spec: object, *names: str) -> None:
    for name in names:
        value = getattr(spec, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1:
            raise ConfigError(f"{type(spec).__name__}.{name} must be in (0, 1], got {value!r}")


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    name: str
    mem_bandwidth_gbps: float  # GB/s per GPU
    peak_tflops: float  # dense bf16 TFLOP/s per GPU
    num_gpus: int = 1  # tensor parallel degree
    # The next three are fitted to a published vLLM measurement (sim/calibration.py,
    # docs/simulator.md): `adaptivespec bench calibrate` reproduces them.
    step_overhead_us: float = 6100.0  # per engine step: scheduling, sampling, streaming
    forward_overhead_us: float = 540.0  # per forward pass: launches, syncs, draft-runner work
    efficiency: float = 0.26  # achieved fraction of peak FLOP/s once a pass is compute-bound
    bandwidth_efficiency: float = 0.8  # achieved fraction of peak bandwidth (assumed)
    allreduce_us: float = 10.0  # per all-reduce when num_gpus > 1, two per layer (assumed)

    def __post_init__(self) -> None:
        _positive(self, "mem_bandwidth_gbps", "peak_tflops", "num_gpus")
        _non_negative(self, "step_overhead_us", "forward_overhead_us", "allreduce_us")
        _fraction(self, "efficiency", "bandwidth_efficiency")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    params: float  # parameter count
    layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    bytes_per_param: float = 2.0  # bf16 weights
    kv_bytes_per_value: float = 2.0  # bf16 KV cache

    def __post_init__(self) -> None:
        _positive(self, "params", "layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim")
        _positive(self, "bytes_per_param", "kv_bytes_per_value")

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.num_kv_heads * self.head_dim * self.kv_bytes_per_value

    @property
    def attention_flops_per_token_per_context(self) -> float:
        """QK^T and PV: 2 matmuls x 2 FLOPs x query width, per layer."""
        return 4 * self.layers * self.num_heads * self.head_dim


HARDWARE_PRESETS = {
    # NVIDIA H100 SXM5 datasheet: 3.35 TB/s HBM3, 989 TFLOP/s dense BF16.
    "h100-sxm": HardwareSpec("h100-sxm", 3350, 989),
    # NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e, 989 TFLOP/s dense BF16.
    "h200": HardwareSpec("h200", 4800, 989),
    # NVIDIA A100 80GB SXM datasheet: 2,039 GB/s HBM2e, 312 TFLOP/s dense BF16.
    "a100-80gb": HardwareSpec("a100-80gb", 2039, 312),
    # NVIDIA L4 datasheet: 300 GB/s GDDR6, 121 TFLOP/s dense BF16 (242 is with sparsity).
    "l4": HardwareSpec("l4", 300, 121),
}

MODEL_PRESETS = {
    # meta-llama config.json values; parameter counts from the model cards.
    "llama-3.1-8b": ModelSpec("llama-3.1-8b", 8.03e9, 32, 4096, 32, 8, 128),
    "llama-3.1-70b": ModelSpec("llama-3.1-70b", 70.6e9, 80, 8192, 64, 8, 128),
    "llama-3.2-1b": ModelSpec("llama-3.2-1b", 1.24e9, 16, 2048, 32, 8, 64),
    "llama-3.2-3b": ModelSpec("llama-3.2-3b", 3.21e9, 28, 3072, 24, 8, 128),
}


def hardware(name: str | None = None, spec_file: Path | None = None) -> HardwareSpec:
    return _resolve(HardwareSpec, HARDWARE_PRESETS, name, spec_file, "hardware")


def model(name: str | None = None, spec_file: Path | None = None) -> ModelSpec:
    return _resolve(ModelSpec, MODEL_PRESETS, name, spec_file, "model")


def _resolve(kind: type[S], presets: dict[str, S], name: str | None, spec_file: Path | None, what: str) -> S:
    if spec_file is not None:
        return load_spec(kind, spec_file)
    if name is None:
        raise ConfigError(f"name a {what} preset ({', '.join(presets)}) or pass a --{what}-spec FILE.json")
    if name not in presets:
        raise ConfigError(f"unknown {what} preset {name!r}; presets: {', '.join(presets)}")
    return presets[name]


def load_spec(kind: type[S], path: Path) -> S:
    """Reads a JSON spec; unknown or missing keys are errors that list the valid keys."""
    spec_fields = {f.name: f for f in fields(kind)}
    required = [n for n, f in spec_fields.items() if f.default is MISSING]
    try:
        data: Any = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object with keys {', '.join(spec_fields)}")
    unknown = sorted(set(data) - set(spec_fields))
    missing = [n for n in required if n not in data]
    if unknown or missing:
        problem = f"unknown keys {unknown}" if unknown else f"missing keys {missing}"
        raise ConfigError(
            f"{path}: {problem}; required keys: {', '.join(required)}; "
            f"optional: {', '.join(n for n in spec_fields if n not in required)}"
        )
    try:
        return kind(**data)
    except TypeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
