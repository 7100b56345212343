"""The runner interface: the engine's only view of model compute.

The `hf` runner runs transformers models; the `sim` runner prices the same steps on a
virtual clock. Rows [0, B) are the decoding batch; the scheduler owns which request sits
in which row and tells the runner when rows move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from adaptivespec.engine.sampling import SamplingParams


@dataclass(frozen=True, slots=True)
class PrefillItem:
    prompt: list[int]
    params: SamplingParams
    seed: int  # the request's seed, or one drawn by the engine


@dataclass(frozen=True, slots=True)
class PrefillOutput:
    first_tokens: list[int]


@dataclass(frozen=True, slots=True)
class DecodeOutput:
    tokens: list[list[int]]  # tokens emitted per row, 1 to k+1 each
    drafted: list[int]  # drafts proposed per row
    accepted: list[int]  # drafts accepted per row
    k: int  # draft length asked of the drafter: the policy's K, capped at max_spec_tokens
    width: int  # drafts verified per row (0 = a plain step); below k when the drafter found fewer
    draft_seconds: float
    verify_seconds: float
    step_seconds: float


class Runner(Protocol):
    model_key: str
    hardware_key: str
    max_batch: int
    max_spec_tokens: int
    eos_token_ids: frozenset[int]
    vocab_rows: int  # token ids a prompt may hold: the embedding table's rows, not len(tokenizer)

    def describe(self) -> str: ...

    def prefill(self, row_start: int, items: list[PrefillItem]) -> PrefillOutput: ...

    def decode(self, batch: int, k: int) -> DecodeOutput: ...

    def move_rows(self, srcs: list[int], dsts: list[int]) -> None: ...
