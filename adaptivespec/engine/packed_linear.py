"""Linear layers whose weights are reordered once, at load, into oneDNN's blocked layout.

On a CPU, torch's `linear` runs a GEMM over the checkpoint's [out, in] weight on every
call. For the few rows of a decode step that GEMM is bound by reading the weights, and it
reads them at well under the memory's bandwidth; from the reordered weight the same GEMM
runs several times faster (`bench variants --compare linear` measures the whole step;
docs/results.md). Packing the weights once is
what vLLM's CPU backend, inductor's weight prepacking and OpenVINO all do. The result equals
torch's up to float rounding (about 1e-6 in float32), which is why the step's outputs are
compared in tests and benchmarks rather than assumed.

The dense weight stays on the module, so code that reads `.weight` (tied embeddings,
transformers' own helpers) keeps working; the cost is a second copy of every linear
weight. `linear = "torch"` turns packing off.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch

PACKABLE_DTYPES = (torch.float32, torch.bfloat16)


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN packing exists for CPU float32 and bfloat16 only; cuda runs cuBLAS as it is.

    oneDNN packs bfloat16 only on CPUs with its bf16 instructions (AVX-512 BW/VL/DQ or
    AVX-NE-CONVERT); elsewhere it refuses at load, so those layers keep torch's linear."""
    return (
        device.type == "cpu"
        and dtype in PACKABLE_DTYPES
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and (dtype != torch.bfloat16 or bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()))
    )


class PackedLinear(torch.nn.Module):
    """`nn.Linear` computed from a prepacked copy of its weight (or from the dense one, when off)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        # Not a buffer: it is derived from `weight`, and must not be saved or moved with it.
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        self.enabled = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed={self.enabled}"


@torch.inference_mode()
def pack_linears(model: torch.nn.Module) -> int:
    """Replaces every plain `nn.Linear` in `model` with a PackedLinear; returns how many.

    Subclasses of nn.Linear (quantized or adapter layers) compute something else and are left alone.
    """
    targets = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is torch.nn.Linear
    ]
    for parent, name, child in targets:
        setattr(parent, name, PackedLinear(child))
    return len(targets)


def _packed(models: Iterable[torch.nn.Module]) -> Iterator[PackedLinear]:
    return (m for model in models for m in model.modules() if isinstance(m, PackedLinear))


def packed_layers(models: Iterable[torch.nn.Module]) -> int:
    return sum(1 for _ in _packed(models))


def use_packed_linears(models: Iterable[torch.nn.Module], on: bool) -> None:
    """Switches packed layers between the packed weight and the dense one (side-by-side benchmarks)."""
    for layer in _packed(models):
        layer.enabled = on


@contextmanager
def torch_linears(models: Sequence[torch.nn.Module]) -> Iterator[None]:
    """The models as transformers loaded them, for a baseline run; packed again afterwards."""
    use_packed_linears(models, on=False)
    try:
        yield
    finally:
        use_packed_linears(models, on=True)
