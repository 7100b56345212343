"""The teacher's side of training: the target continues each prompt, then shows what it saw.

For each prompt the target writes a continuation (greedy or sampled, alternately), and one
forward over prompt + continuation records, at every position, the inputs of the head's
auxiliary layers and the target's normed last state (what its LM head reads, so the
teacher's distribution over any vocabulary is one matmul away). They are taken by hooks on
those layers, as the serving engine's `HiddenTap` takes them. Shards are saved as they are
made, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

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
    def __init__(self, target: PreTrainedModel, aux_layers: tuple[int, ...], eos_ids: frozenset[int]) -> None:
        self.target = target
        self.aux_layers = aux_layers
        self.eos_ids = eos_ids
        self.pad = min(eos_ids) if eos_ids else 0

    def continue_prompts(
        self, prompts: list[list[int]], new_tokens: int, sampled: bool, seed: int
    ) -> list[list[int]]:
        """Each prompt followed by the target's continuation (ended at its EOS, which stays)."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, prompt in enumerate(prompts):
            ids[r, width - len(prompt) :] = torch.tensor(prompt)
            mask[r, width - len(prompt) :] = 1
        torch.manual_seed(seed)
        options: dict[str, Any] = {"do_sample": sampled}
        if sampled:
            options |= {"temperature": 0.8, "top_p": 0.95}
        generate = cast(Callable[..., torch.Tensor], self.target.generate)
        out = generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            pad_token_id=self.pad,
            **options,
        )
        sequences = []
        for r, prompt in enumerate(prompts):
            generated = out[r, width:].tolist()
            end = next((i + 1 for i, t in enumerate(generated) if t in self.eos_ids), len(generated))
            sequences.append(list(prompt) + generated[:end])
        return sequences

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
