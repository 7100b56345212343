"""Which attention each layer runs, the masks that express it, and what cannot run exactly.

The slot cache writes every token at the column equal to its position, so one boolean
"may attend" mask per layer kind says everything: full layers see every earlier column,
sliding layers only the last `window` of them. The sliding predicate is transformers' own
(`sliding_window_overlay`: kv > q - window), so output equals `generate()`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PretrainedConfig

from adaptivespec.engine.ragged import RaggedLayout
from adaptivespec.errors import ModelLoadError

FULL = "full_attention"
SLIDING = "sliding_attention"

# Architectures whose layers keep state that a per-column KV cache cannot hold or roll back.
_RECURRENT_TYPES = frozenset(
    {
        "mamba", "mamba2", "falcon_mamba", "jamba", "zamba", "zamba2", "bamba", "rwkv",
        "recurrent_gemma", "qwen3_next", "falcon_h1", "granitemoehybrid", "lfm2", "nemotron_h",
        "minimax", "xlstm", "plamo2",
    }
)  # fmt: skip
# RoPE variants whose frequencies depend on the current sequence length, hence on the batch.
_LENGTH_DEPENDENT_ROPE = frozenset({"dynamic", "longrope"})


@dataclass(frozen=True, slots=True)
class AttentionSpec:
    layer_kinds: tuple[str, ...]  # FULL or SLIDING, one per decoder layer
    window: int | None  # sliding window in tokens; None when no layer slides
    additive: bool  # eager attention adds the mask to the scores, so it must be 0 / -inf

    @classmethod
    def from_config(cls, config: PretrainedConfig, additive: bool = False) -> AttentionSpec:
        text = config.get_text_config()
        layers = int(text.num_hidden_layers)
        window = getattr(text, "sliding_window", None)
        kinds = getattr(text, "layer_types", None)
        if kinds is None:
            kinds = [SLIDING if window else FULL] * layers
        kinds = tuple(kinds[:layers])
        unknown = sorted(set(kinds) - {FULL, SLIDING})
        if unknown:
            raise ModelLoadError(
                f"layers of type {unknown} (linear attention, state-space or chunked) cannot run on the "
                "slot KV cache; serve a model whose layers are all full or sliding-window attention"
            )
        if SLIDING in kinds and not window:
            raise ModelLoadError("the config has sliding-window layers but no sliding_window size")
        return cls(kinds, int(window) if SLIDING in kinds and window else None, additive)

    @property
    def mixed(self) -> bool:
        return len(set(self.layer_kinds)) > 1

    def masks(self, layout: RaggedLayout, dtype: torch.dtype) -> torch.Tensor | dict[str, torch.Tensor]:
        """What to pass as `attention_mask`: one 4-D mask, or one per layer kind for hybrid models.

        A 4-D mask is used as given by every model; models that mix layer kinds also take a
        dict keyed by layer type, which is the only way to give each kind its own mask.
        """
        by_kind = {kind: self._mask(kind, layout, dtype) for kind in set(self.layer_kinds)}
        return by_kind if self.mixed else by_kind[self.layer_kinds[0]]

    def _mask(self, kind: str, layout: RaggedLayout, dtype: torch.dtype) -> torch.Tensor:
        allowed = layout.mask  # [n, 1, T, read_len] bool
        if kind == SLIDING and self.window is not None:
            columns = torch.arange(layout.read_len, device=allowed.device).view(1, 1, 1, -1)
            query = layout.positions.unsqueeze(1).unsqueeze(3)  # [n, 1, T, 1]
            allowed = allowed & (columns > query - self.window)
        if not self.additive:
            return allowed
        blocked = torch.full(allowed.shape, torch.finfo(dtype).min, dtype=dtype, device=allowed.device)
        return blocked.masked_fill(allowed, 0.0)


def attention_implementation(config: PretrainedConfig) -> str:
    """Soft-capped attention logits (Gemma 2) are only computed by the eager implementation."""
    text = config.get_text_config()
    return "eager" if getattr(text, "attn_logit_softcapping", None) else "sdpa"


def check_supported(config: PretrainedConfig, positions: int) -> None:
    """Refuses, at load, every model the engine could not run exactly."""
    text = config.get_text_config()
    model_type = str(getattr(text, "model_type", ""))
    if model_type in _RECURRENT_TYPES or getattr(text, "layers_block_type", None):
        raise ModelLoadError(
            f"{model_type!r} has state-space or linear-attention layers, which the slot KV cache "
            "cannot hold or roll back; serve a transformer with full or sliding-window attention"
        )
    if getattr(text, "kv_lora_rank", None):
        raise ModelLoadError(
            f"{model_type!r} uses multi-head latent attention (MLA), which the slot KV cache does not "
            "store; serve a model with standard multi-head or grouped-query attention"
        )
    if getattr(text, "attention_chunk_size", None):
        raise ModelLoadError(f"{model_type!r} uses chunked attention, which the engine does not mask yet")
    for rope_type in _rope_types(
        getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None)
    ):
        if rope_type in _LENGTH_DEPENDENT_ROPE:
            raise ModelLoadError(
                f"{model_type!r} uses {rope_type!r} RoPE scaling, whose positions depend on the batch's "
                "sequence lengths, so batched output would differ from single-request output"
            )
    if getattr(config, "quantization_config", None) is not None:
        raise ModelLoadError(
            "quantized checkpoints are not supported (only GGUF files, which are dequantized at load); "
            "serve the unquantized model, or pass its .gguf file"
        )
    limit = getattr(text, "max_position_embeddings", None)
    if limit is not None and positions > int(limit):
        raise ModelLoadError(
            f"max_context + max_spec_tokens = {positions} positions, but the model has "
            f"max_position_embeddings = {limit}; lower --max-context (or --max-spec-tokens) so that "
            f"their sum is at most {limit}"
        )


def _rope_types(params: Any) -> Iterator[str]:
    """rope_parameters is one dict, or one per layer type (Gemma 3)."""
    if not isinstance(params, dict):
        return
    if "rope_type" in params or "type" in params:
        yield str(params.get("rope_type", params.get("type")))
    for value in params.values():
        if isinstance(value, dict):
            yield from _rope_types(value)
