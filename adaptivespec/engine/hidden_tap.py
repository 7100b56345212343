"""The target's hidden states at chosen layers, kept per row and column beside its KV cache.

An EAGLE-3 head reads the inputs of a few target layers at every position. They are taken
from the target's own forwards (prefill, verify, plain steps, prompt chunks flattened with a
step) by hooks on those layers, and written where the forward writes its KV: the same rows
and columns (`SlotKVCache.write_index`), so a rejected draft's states are overwritten as its
KV is, pads land in the sink column, and moving rows moves them alike. Forwards that do not
run on a slot cache (transformers' own `generate`, say) are left alone. Where OpenVINO runs
the target's forwards, its passes return the states and write them here themselves (`write`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle
from transformers import PreTrainedModel

from adaptivespec.engine.kvcache import SlotKVCache


def reading_points(target: PreTrainedModel) -> list[nn.Module]:
    """Where an auxiliary layer id is read: layer i's input at layer i, and one past the last
    (speculators allows it) at the final norm, whose input is the last layer's output."""
    decoder: Any = target.get_decoder()
    layers: Any = getattr(decoder, "layers", None)
    if layers is None:
        raise ValueError("the target's decoder exposes no `layers`; an EAGLE-3 head cannot read it")
    return [*layers, decoder.norm]


class HiddenTap:
    def __init__(
        self, target: PreTrainedModel, layers: tuple[int, ...], max_batch: int, cache_len: int
    ) -> None:
        modules = reading_points(target)
        param = next(target.parameters())
        hidden = int(target.config.get_text_config().hidden_size)
        self.width = hidden
        self.layers = layers
        # [max_batch, cache_len, len(layers) * hidden]: the layers' inputs, side by side
        self.states = torch.zeros(
            max_batch, cache_len, len(layers) * hidden, dtype=param.dtype, device=param.device
        )
        self._bound: SlotKVCache | None = None  # the cache of the forward under way, if ours
        self._handles: list[RemovableHandle] = [
            modules[0].register_forward_pre_hook(self._bind, with_kwargs=True)
        ]
        self._handles += [
            modules[layer].register_forward_pre_hook(self._hook(slot), with_kwargs=True)
            for slot, layer in enumerate(layers)
        ]

    @property
    def nbytes(self) -> int:
        return self.states.numel() * self.states.element_size()

    def _bind(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        self._bound = cache if isinstance(cache, SlotKVCache) else None

    def _hook(self, slot: int) -> Any:
        lo, hi = slot * self.width, (slot + 1) * self.width

        def keep(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self._bound is None:
                return
            hidden = args[0] if args else kwargs["hidden_states"]  # [n, T, hidden]
            rows, cols = self._bound.write_index
            self.states[rows, cols, lo:hi] = hidden.to(self.states.dtype)

        return keep

    def write(self, rows: torch.Tensor, cols: torch.Tensor, states: torch.Tensor) -> None:
        """Token i of a forward run elsewhere wrote row rows[i], column cols[i] ([tokens] each);
        states [tokens, len(layers) * hidden] are its states at every layer, side by side."""
        self.states[rows, cols] = states.to(self.states.device, self.states.dtype)

    def read(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """rows [n, 1] and cols [n, T] -> the kept states [n, T, len(layers) * hidden]."""
        return self.states[rows, cols]

    def move_rows(self, srcs: torch.Tensor, dsts: torch.Tensor, upto: int) -> None:
        self.states[dsts, :upto] = self.states[srcs, :upto]

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
