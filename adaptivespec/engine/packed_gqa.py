"""Grouped-query attention for verify passes, with each KV head's query heads packed together.

With G query heads per KV head, SDPA either copies K and V G times (`repeat_kv`) or takes
`enable_gqa`, which torch's CPU kernels serve by expanding them too. For a few query tokens
that copy of the whole cache, in every layer, is most of the attention's cost. Packing
reshapes the queries [n, H, T, d] into [n, H_kv, G*T, d] instead: each KV head attends
once for all of its query heads, K and V are read in place, and each query token's mask
row is repeated for its G heads. It is the same attention; only the order of the work
changes. A single query token and prompts keep transformers' own path: there packing
gains nothing measurable, and prompt kernels already tile K and V.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from adaptivespec.engine.segments import Segments

NAME = "adaptivespec_packed_gqa"
MAX_PACKED_QUERY = 16  # query tokens per row up to which packing is used: verify passes
# One query token gains nothing measurable (transformers packs it itself where it has no GQA kernel).


def packed_gqa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [n, H, T, d]
    key: torch.Tensor,  # [n, H_kv, L, d]
    value: torch.Tensor,  # [n, H_kv, L, d_v]
    attention_mask: torch.Tensor | None,  # [n, 1, T, L] bool or additive
    *,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """An attention function for transformers' registry; returns [n, T, H, d_v] like its SDPA.

    With `segments` (a flattened step with prompt chunks, see segments.py), each group of rows
    attends on its own, through this same function.
    """
    segments: Segments | None = kwargs.pop("segments", None)
    if segments is not None:

        def group(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return packed_gqa_attention(module, q, k, v, mask, dropout=dropout, scaling=scaling, **kwargs)[0]

        return segments.attend(query, key, value, group), None
    n, heads, length, _ = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    if (
        attention_mask is None  # a query of several tokens would then need causality
        or attention_mask.shape[1] != 1  # a mask per head cannot be shared by a group
        or groups == 1
        or not 1 < length <= MAX_PACKED_QUERY
        or kwargs.get("position_bias") is not None
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    # Head h reads KV head h // G (transformers' repeat_kv), so heads are grouped KV-major.
    packed = query.reshape(n, kv_heads, groups * length, query.shape[-1])
    width = attention_mask.shape[-1]
    mask = attention_mask.unsqueeze(2).expand(n, 1, groups, length, width).reshape(n, 1, -1, width)
    out = torch.nn.functional.scaled_dot_product_attention(
        packed, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )  # [n, H_kv, G*T, d_v]
    return out.reshape(n, heads, length, value.shape[-1]).transpose(1, 2).contiguous(), None


def register() -> str:
    """Adds the function to transformers' registries (idempotent); returns its name.

    The mask registry needs it too: code that builds its own masks (`generate`, a model
    called without our 4-D mask) looks the mask up by the implementation's name, and
    must build what SDPA takes, sliding windows included.
    """
    AttentionInterface.register(NAME, packed_gqa_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def use_attention(models: Iterable[PreTrainedModel], packed: bool) -> None:
    """Switches loaded models between packed GQA attention and transformers' SDPA, live.

    Models on eager attention (soft-capped logits) keep it: neither SDPA path computes them.
    """
    for model in models:
        if model.config._attn_implementation in (NAME, "sdpa"):
            model.set_attn_implementation(register() if packed else "sdpa")
