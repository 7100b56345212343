"""The `speculators` EAGLE-3 checkpoint format: what a head's directory says, read and written.

A head directory holds a `config.json` with `speculators_model_type: "eagle3"` and safetensors
weights named as speculators' `Eagle3DraftModel` names them (`fc`, `layers.0.*`, `norm`,
`lm_head`, and the vocabulary maps `d2t`/`t2d`). vLLM loads the same directory. The target's
embedding may be left out, as speculators and vLLM both allow: it is then the target's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from adaptivespec.errors import ModelLoadError

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
# The layer kinds whose decoder layers the head can be built from (speculators' own table).
LAYER_TYPES = ("llama", "qwen3")


@dataclass(frozen=True, slots=True)
class Eagle3Spec:
    """What a head's config says; `aux_layers` is resolved against the target when it is None."""

    layer_config: dict[str, Any]  # speculators' `transformer_layer_config`, a transformers config dict
    draft_vocab_size: int
    aux_layers: tuple[int, ...] | None  # the target layers whose inputs the head reads
    norm_before_residual: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    verifier: str | None = None  # the target it was trained for, as its config names it

    def __post_init__(self) -> None:
        kind = self.layer_config.get("model_type", "qwen3")
        if kind not in LAYER_TYPES:
            raise ModelLoadError(
                f"this EAGLE-3 head is built from {kind!r} decoder layers; adaptivespec runs heads "
                f"built from {LAYER_TYPES} layers (speculators' own kinds)"
            )
        if self.norm_before_fc and self.fc_norm:
            raise ModelLoadError(
                "the head's config sets both norm_before_fc and fc_norm, which exclude each other"
            )
        if self.draft_vocab_size < 1:
            raise ModelLoadError(f"draft_vocab_size must be positive, got {self.draft_vocab_size}")

    @property
    def layer_type(self) -> str:
        return str(self.layer_config.get("model_type", "qwen3"))

    def with_aux_layers(self, target_layers: int) -> Eagle3Spec:
        """The head's auxiliary layers, or speculators' default for a target of that depth."""
        if self.aux_layers is None:
            return replace(self, aux_layers=default_aux_layers(target_layers))
        ids = self.aux_layers
        if len(set(ids)) != len(ids) or not all(0 <= i <= target_layers for i in ids):
            raise ModelLoadError(
                f"the head reads target layers {list(ids)}, but the target has {target_layers} "
                "layers (ids must be distinct, from 0 to that count); was it trained for another model?"
            )
        return self

    def to_json(self, speculative_tokens: int) -> dict[str, Any]:
        """The config as speculators writes it, so that its `Eagle3DraftModel` and vLLM load it."""
        return {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": "eagle3",
            "speculators_version": "0.9.0",
            "speculators_config": {
                "algorithm": "eagle3",
                "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens}],
                "verifier": {"name_or_path": self.verifier, "architectures": []},
            },
            "transformer_layer_config": self.layer_config,
            "draft_vocab_size": self.draft_vocab_size,
            "norm_before_residual": self.norm_before_residual,
            "norm_before_fc": self.norm_before_fc,
            "fc_norm": self.fc_norm,
            "norm_output": self.norm_output,
            "target_hidden_size": self.layer_config.get("hidden_size"),
            "eagle_aux_hidden_state_layer_ids": None if self.aux_layers is None else list(self.aux_layers),
        }


def default_aux_layers(target_layers: int) -> tuple[int, ...]:
    """speculators' choice (early, middle, late); where that names a layer twice or one the
    target lacks (fewer than 7 layers: 6 gives 2, 3, 3, which speculators refuses too), three
    spread over [0, layers], where `layers` stands for the last layer's output."""
    ids = (2, target_layers // 2, target_layers - 3)
    if len(set(ids)) == len(ids) and min(ids) >= 0:
        return ids
    return tuple(sorted({round(target_layers * i / 2) for i in range(3)}))


def read_spec(path: str | Path) -> Eagle3Spec:
    try:
        raw = json.loads((Path(path) / CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read the EAGLE-3 head's {CONFIG} in {path}: {exc}") from exc
    if raw.get("speculators_model_type") != "eagle3":
        raise ModelLoadError(f"{path} is not a speculators EAGLE-3 head (speculators_model_type != 'eagle3')")
    aux = raw.get("eagle_aux_hidden_state_layer_ids")
    verifier = (raw.get("speculators_config") or {}).get("verifier") or {}
    return Eagle3Spec(
        layer_config=dict(raw.get("transformer_layer_config") or {}),
        draft_vocab_size=int(raw.get("draft_vocab_size", 32000)),
        aux_layers=None if aux is None else tuple(int(i) for i in aux),
        norm_before_residual=bool(raw.get("norm_before_residual", False)),
        norm_before_fc=bool(raw.get("norm_before_fc", False)),
        fc_norm=bool(raw.get("fc_norm", False)),
        norm_output=bool(raw.get("norm_output", False)),
        verifier=verifier.get("name_or_path"),
    )


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the head, from one safetensors file or a sharded index."""
    root = Path(path)
    if (root / WEIGHTS).is_file():
        return load_file(str(root / WEIGHTS))
    if (root / INDEX).is_file():
        shards = sorted(set(json.loads((root / INDEX).read_text())["weight_map"].values()))
        weights: dict[str, torch.Tensor] = {}
        for shard in shards:
            weights.update(load_file(str(root / shard)))
        return weights
    raise ModelLoadError(f"the EAGLE-3 head in {path} has no {WEIGHTS} (nor {INDEX})")


def write_head(
    path: str | Path, spec: Eagle3Spec, weights: dict[str, torch.Tensor], speculative_tokens: int
) -> None:
    """Writes config and weights; the config last, so that a directory with one is complete."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    save_file({name: t.detach().contiguous() for name, t in weights.items()}, str(root / WEIGHTS))
    (root / CONFIG).write_text(json.dumps(spec.to_json(speculative_tokens), indent=2) + "\n")
