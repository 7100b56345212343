"""An EAGLE-3 head as a torch module: speculators' `Eagle3DraftModel` at inference, over our caches.

The head reads, at each position, the target's hidden states at its auxiliary layers (fused
by `fc`) beside the embedding of the next token, and predicts the token after it through a
reduced vocabulary. Its first decoder layer takes both halves (2 x hidden wide), normed
apart; later drafts feed back the head's own output in place of the target's states. The
module names its weights as speculators does, so a checkpoint's state dict loads as is.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn
from transformers import LlamaConfig, PretrainedConfig, PreTrainedModel, Qwen3Config
from transformers.cache_utils import Cache
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm, Qwen3RotaryEmbedding

from adaptivespec.engine.cache_keyword import cache_keyword
from adaptivespec.engine.eagle3_format import Eagle3Spec
from adaptivespec.errors import ModelLoadError

_PARTS: dict[str, tuple[type[PretrainedConfig], type[nn.Module], type[nn.Module], type[nn.Module]]] = {
    "llama": (LlamaConfig, LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding),
    "qwen3": (Qwen3Config, Qwen3DecoderLayer, Qwen3RMSNorm, Qwen3RotaryEmbedding),
}
# Weights the head may lack: the embedding is then the target's, and the maps the identity.
OPTIONAL = frozenset({"embed_tokens.weight", "d2t", "t2d"})


def embedding_rows(model: PreTrainedModel) -> int:
    """How many token ids the model's input embedding holds (its vocabulary, padded or not)."""
    return int(cast(nn.Embedding, model.get_input_embeddings()).num_embeddings)


def layer_config(spec: Eagle3Spec) -> PretrainedConfig:
    config_class = _PARTS[spec.layer_type][0]
    values = {key: value for key, value in spec.layer_config.items() if key != "model_type"}
    config = config_class(**values)
    config._attn_implementation = "sdpa"  # the masks below are boolean 4-D masks
    return config


class Eagle3Head(nn.Module):
    d2t: torch.Tensor  # [Vd] long: target id of draft id i is i + d2t[i] (speculators' offsets)
    t2d: torch.Tensor  # [V] bool: the target ids the head drafts among

    def __init__(self, spec: Eagle3Spec) -> None:
        super().__init__()
        if spec.aux_layers is None:
            raise ValueError("resolve the head's auxiliary layers against the target first (with_aux_layers)")
        self.spec = spec
        config = layer_config(spec)
        self.config = config
        _, layer_class, norm_class, rotary_class = _PARTS[spec.layer_type]
        hidden, eps = int(config.hidden_size), float(config.rms_norm_eps)
        self.hidden_size = hidden
        self.target_vocab = int(config.vocab_size)
        aux = len(spec.aux_layers)
        self.fc = nn.Linear(aux * hidden, hidden, bias=False)
        self.input_norm = norm_class(aux * hidden, eps=eps) if spec.norm_before_fc else None
        self.fc_norm = (
            nn.ModuleList([norm_class(hidden, eps=eps) for _ in range(aux)]) if spec.fc_norm else None
        )
        self.layers = nn.ModuleList([layer_class(config, i) for i in range(int(config.num_hidden_layers))])
        _widen_first_layer(self.layers[0], config, norm_class)
        self.norm = norm_class(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, spec.draft_vocab_size, bias=False)
        self.rotary_emb = rotary_class(config=config)
        self.embed_tokens: nn.Embedding | None = None  # set only when the checkpoint has its own
        # target id of each draft id, as an offset (speculators' d2t): target = draft + d2t[draft]
        self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(self.target_vocab, dtype=torch.bool))
        self._cache_kwarg = cache_keyword(layer_class.forward)

    @property
    def reduced(self) -> bool:
        return self.spec.draft_vocab_size != self.target_vocab

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """A checkpoint's tensors, by speculators' names; what it must have, it must have."""
        if "embed_tokens.weight" in weights:
            vocab, hidden = weights["embed_tokens.weight"].shape
            self.embed_tokens = nn.Embedding(int(vocab), int(hidden))
        if not self.reduced:
            weights = {k: v for k, v in weights.items() if k not in ("d2t", "t2d")}
            self.d2t.zero_()  # the identity
        elif "d2t" not in weights:
            raise ModelLoadError("the head drafts over a reduced vocabulary but its weights lack the d2t map")
        own = self.state_dict()
        missing = sorted(set(own) - set(weights) - OPTIONAL)
        unknown = sorted(set(weights) - set(own))
        if missing or unknown:
            raise ModelLoadError(
                f"the EAGLE-3 head's weights do not match its config: missing {missing[:6]}, "
                f"unexpected {unknown[:6]}; was it written by speculators for this layer kind?"
            )
        self.load_state_dict({k: v for k, v in weights.items() if k in own}, strict=False)

    def embedding(self, target: PreTrainedModel) -> nn.Module:
        """The table the head embeds tokens with: its checkpoint's own copy, or the target's."""
        return self.embed_tokens if self.embed_tokens is not None else target.get_input_embeddings()

    def weights(self) -> dict[str, torch.Tensor]:
        """What a checkpoint of this head holds (speculators' names; the maps only when reduced)."""
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("rotary_emb")}
        if not self.reduced:
            state = {k: v for k, v in state.items() if k not in ("d2t", "t2d")}
        return state

    def fuse(self, aux: torch.Tensor) -> torch.Tensor:
        """aux [..., A * hidden] (the target's states at the auxiliary layers) -> [..., hidden]."""
        if self.input_norm is not None:
            aux = self.input_norm(aux)
        if self.fc_norm is not None:
            parts = aux.chunk(len(self.fc_norm), dim=-1)
            aux = torch.cat([norm(part) for norm, part in zip(self.fc_norm, parts, strict=True)], dim=-1)
        return self.fc(aux)

    def forward(
        self,
        embeds: torch.Tensor,  # [n, T, hidden] the tokens' embeddings (the target's table, or the head's)
        hidden: torch.Tensor,  # [n, T, hidden] fused target states, or the head's own previous output
        positions: torch.Tensor,  # [n, T] rotary positions
        mask: torch.Tensor,  # [n, 1, T, L] bool, True = may attend
        cache: Cache | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (the state to feed back [n, T, hidden], logits over the draft vocabulary [n, T, Vd])."""
        first: Any = self.layers[0]
        rest = self.layers[1:]
        position_embeddings = self.rotary_emb(hidden, positions)
        residual = first.hidden_norm(hidden) if self.spec.norm_before_residual else hidden
        both = torch.cat([first.input_layernorm(embeds), first.hidden_norm(hidden)], dim=-1)
        attended, _ = first.self_attn(both, position_embeddings, mask, cache)
        state = residual + attended
        state = state + first.mlp(first.post_attention_layernorm(state))
        for layer in rest:
            state = layer(
                state,
                attention_mask=mask,
                position_ids=positions,
                position_embeddings=position_embeddings,
                **{self._cache_kwarg: cache},
            )
        normed = self.norm(state)
        return (normed if self.spec.norm_output else state), self.lm_head(normed)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def target_logits(self, logits: torch.Tensor, width: int) -> torch.Tensor:
        """Draft-vocabulary logits [..., Vd] -> [..., width] over the target's ids (-inf elsewhere)."""
        if not self.reduced and logits.shape[-1] == width:
            return logits
        full = logits.new_full((*logits.shape[:-1], width), float("-inf"))
        index = self.to_target_ids(torch.arange(logits.shape[-1], device=logits.device))
        keep = index < width
        full[..., index[keep]] = logits[..., keep]
        return full


def _widen_first_layer(layer: nn.Module, config: PretrainedConfig, norm_class: type[nn.Module]) -> None:
    """The first layer's attention reads [embedding, hidden]: q/k/v twice as wide, and a norm
    of its own for the hidden half (speculators' `Eagle3FirstLayerMixin`)."""
    attn: Any = layer.self_attn
    hidden, head_dim, bias = int(config.hidden_size), int(attn.head_dim), bool(config.attention_bias)
    heads, kv_heads = int(config.num_attention_heads), int(config.num_key_value_heads)
    attn.q_proj = nn.Linear(2 * hidden, heads * head_dim, bias=bias)
    attn.k_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=bias)
    attn.v_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=bias)
    layer.hidden_norm = norm_class(hidden, eps=float(config.rms_norm_eps))
