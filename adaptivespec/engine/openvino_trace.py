"""The model as the openvino runtime's conversion traces it: tensors in and out, its KV cache
fed in as tensors and appended to, and its attention in the form OpenVINO's paged pass finds.

openvino_export.py converts what this traces and caches it; nothing here imports OpenVINO.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.cache_utils import Cache
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from adaptivespec.engine.cache_keyword import cache_keyword
from adaptivespec.engine.hidden_tap import reading_points
from adaptivespec.errors import ConfigError

EXPORT_ATTENTION = "adaptivespec_export_sdpa"


class PastCache(Cache):
    """Past keys and values given as tensors; each layer's update appends the new ones, so the
    traced graph holds Concat(past, new) before attention, the pattern the paged pass rewrites."""

    def __init__(self, past: list[torch.Tensor]) -> None:
        super().__init__(layers=[])
        self.keys = list(past[0::2])
        self.values = list(past[1::2])

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer_idx] = torch.cat([self.keys[layer_idx], key_states], dim=-2)
        self.values[layer_idx] = torch.cat([self.values[layer_idx], value_states], dim=-2)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int | None = 0) -> int:
        return int(self.keys[layer_idx or 0].shape[-2])

    def get_mask_sizes(self, query_length: Any, layer_idx: int = 0) -> tuple[Any, int]:
        return self.keys[layer_idx].shape[-2] + query_length, 0

    @property
    def is_compileable(self) -> bool:
        return False


class Traced(torch.nn.Module):
    """(input_ids, position_ids, beam_idx, *past) -> (logits, *present, *states), tensors
    only; states [n, T, hidden] are the inputs of every layer and of the final norm, in order
    (hidden_tap.reading_points: auxiliary layer id i reads the i-th).

    `beam_idx` reorders the past rows, as optimum's exports do: the paged pass expects a past
    read through that gather, and removes it.

    No mask goes in: transformers builds the causal one from the shapes of the ids and the
    past, and the paged pass replaces it with each sequence's own causality. A mask fed in
    would carry a batch of its own to every attention's output, which then no longer provably
    has the ids' shape, and OpenVINO would keep a dynamic reshape after every layer's
    attention instead of folding it.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model
        self.points = reading_points(model)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        beam_idx: torch.Tensor,
        *past: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        cache = PastCache([p.index_select(0, beam_idx) for p in past])
        states: list[torch.Tensor] = []

        def keep(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            states.append(args[0] if args else kwargs["hidden_states"])

        handles = [point.register_forward_pre_hook(keep, with_kwargs=True) for point in self.points]
        try:
            out = self.model(
                input_ids=input_ids,
                attention_mask=None,
                position_ids=positions,
                use_cache=True,
                **{cache_keyword(self.model.forward): cache},
            )
        finally:
            for handle in handles:
                handle.remove()
        present = [t for pair in zip(cache.keys, cache.values, strict=True) for t in pair]
        return (out.logits, *present, *states)


def _export_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [n, H, T, d]
    key: torch.Tensor,  # [n, H_kv, L, d]
    value: torch.Tensor,  # [n, H_kv, L, d_v]
    attention_mask: torch.Tensor | None,  # [n, 1, T, L]
    *,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA as the paged pass finds it, for the trace only: K and V repeated for each query
    head (where the pass reads the KV heads), then SDPA, then [n, T, H, d_v].

    transformers' own SDPA ends with a reshape that undoes its single-token GQA packing, a
    no-op otherwise, but traced from the output's shape; OpenVINO then keeps a reshape after
    every layer's PagedAttention that optimum's export of the same model does not have.
    """
    unpaged = [name for name in ("softcap", "s_aux", "position_bias") if kwargs.get(name) is not None]
    if unpaged:  # the paged pass would keep none of them
        raise ConfigError(
            f"the openvino runtime cannot run attention with {', '.join(unpaged)}; use --runtime torch"
        )
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal
    )
    return out.transpose(1, 2).contiguous(), None


@contextmanager
def traced_attention(model: PreTrainedModel) -> Iterator[None]:
    """`model` runs _export_attention wherever it ran transformers' SDPA, for the trace."""
    AttentionInterface.register(EXPORT_ATTENTION, _export_attention)
    AttentionMaskInterface.register(EXPORT_ATTENTION, sdpa_mask)
    if model.config._attn_implementation != "sdpa":
        yield
        return
    model.set_attn_implementation(EXPORT_ATTENTION)
    try:
        yield
    finally:
        model.set_attn_implementation("sdpa")
