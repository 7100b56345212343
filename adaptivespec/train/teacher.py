"""The teacher's side of training: the target shows what it saw over each prompt and its continuation.

The continuations are written by the serving engine (continuations.py); one forward over
prompt + continuation then records, at every position, the inputs of the head's
auxiliary layers and the target's normed last state (what its LM head reads, so the
teacher's distribution over any vocabulary is one matmul away). They are taken by hooks on
those layers, as the serving engine's `HiddenTap` takes them. Shards are saved as they are
made, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from adaptivespec.engine.hidden_tap import reading_points

STORE_DTYPE = torch.bfloat16  # states keep their range (a few are in the hundreds) at half the bytes


@dataclass(frozen=True, slots=True)
class Shard:
    tokens: torch.Tensor  # [N, T] long, right-padded with 0
    lengths: torch.Tensor  # [N] long: real tokens per sequence
    aux: torch.Tensor  # [N, T, A * hidden] STORE_DTYPE: the auxiliary layers' inputs, side by side
    final: torch.Tensor  # [N, T, hidden] STORE_DTYPE: the target's normed last state

    def save(self, path: Path) -> None:
        staging = path.with_suffix(".partial")
        torch.save(
            {"tokens": self.tokens, "lengths": self.lengths, "aux": self.aux, "final": self.final}, staging
        )
        staging.rename(path)

    @classmethod
    def load(cls, path: Path) -> Shard:
        raw = torch.load(path, weights_only=True)
        return cls(raw["tokens"], raw["lengths"], raw["aux"], raw["final"])


class Teacher:
    def __init__(self, target: PreTrainedModel, aux_layers: tuple[int, ...], bf16: bool = False) -> None:
        """`bf16`: the forward's matmuls in bf16 (autocast), for a CPU that has bf16 arithmetic;
        the states are stored in bf16 either way."""
        self.target = target
        self.aux_layers = aux_layers
        self.bf16 = bf16

    def record(self, sequences: list[list[int]], dtype: torch.dtype = STORE_DTYPE) -> Shard:
        """One forward over the sequences (right-padded), keeping the states the head learns
        from, in `dtype`."""
        width = max(len(s) for s in sequences)
        tokens = torch.zeros(len(sequences), width, dtype=torch.long)
        for r, sequence in enumerate(sequences):
            tokens[r, : len(sequence)] = torch.tensor(sequence)
        lengths = torch.tensor([len(s) for s in sequences])
        mask = (torch.arange(width) < lengths[:, None]).long()
        kept: dict[str, torch.Tensor] = {}
        modules = reading_points(self.target)
        hooks = [
            modules[layer].register_forward_pre_hook(_keep(kept, f"aux{slot}"), with_kwargs=True)
            for slot, layer in enumerate(self.aux_layers)
        ]
        hooks.append(modules[-1].register_forward_hook(_keep_output(kept, "final")))
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                self.target(input_ids=tokens, attention_mask=mask, logits_to_keep=1)
        finally:
            for hook in hooks:
                hook.remove()
        aux = torch.cat([kept[f"aux{slot}"] for slot in range(len(self.aux_layers))], dim=-1)
        return Shard(tokens, lengths, aux.to(dtype), kept["final"].to(dtype))


def _keep(kept: dict[str, torch.Tensor], name: str) -> Callable[..., None]:
    def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        kept[name] = (args[0] if args else kwargs["hidden_states"]).detach()

    return hook


def _keep_output(kept: dict[str, torch.Tensor], name: str) -> Callable[..., None]:
    def hook(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
        kept[name] = output.detach()

    return hook
