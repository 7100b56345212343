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
    """Feeds prompt[start:end] into the row's cache; the chunk that reaches the end samples.

    A long prompt is fed in chunks across steps, so that the streams already decoding keep
    their cadence; the earlier chunks' tokens are already in the cache at columns [0, start).
    """

    prompt: list[int]  # the whole prompt
    params: SamplingParams
    seed: int  # the request's seed, or one drawn by the engine
    start: int = 0
    end: int | None = None  # None: the end of the prompt

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.stop <= len(self.prompt):
            raise ValueError(f"a prefill chunk needs 0 <= start < end <= {len(self.prompt)}")

    @property
    def stop(self) -> int:
        return len(self.prompt) if self.end is None else self.end

    @property
    def chunk(self) -> list[int]:
        return self.prompt[self.start : self.stop]

    @property
    def completes(self) -> bool:
        return self.stop == len(self.prompt)


@dataclass(frozen=True, slots=True)
class PrefillOutput:
    first_tokens: list[int | None]  # per item; None for a chunk that does not finish its prompt
    seconds: float  # what the prefill took, on the runner's clock (the sim's is virtual)


@dataclass(frozen=True, slots=True)
class ShadowScore:
    """What a drafter that did not run would have kept, over rows whose output has since
    covered its drafts (shadow_drafts.py): counted as a step of its own at K = `k`."""

    method: str
    k: int  # drafts each row was scored on
    rows: int
    kept_at_least: tuple[int, ...]  # [j - 1]: rows whose first j drafts the output matched, j = 1..k


@dataclass(frozen=True, slots=True)
class DecodeOutput:
    tokens: list[list[int]]  # tokens emitted per row, 1 to k+1 each
    drafted: list[int]  # drafts proposed per row
    accepted: list[int]  # drafts accepted per row
    k: int  # draft length asked of the drafter: the policy's K, capped at max_spec_tokens
    method: str  # the drafter that drafted ("ngram", "draft", "suffix", "eagle3"); "" for a step at K = 0
    width: int  # drafts verified per row (0 = a plain step); below k when the drafter found fewer
    draft_seconds: float
    verify_seconds: float
    step_seconds: float
    # What switching the drafter back on cost this step, when it was caught up apart: the
    # tokens it missed at K = 0 and the seconds its catch-up forward took, within draft_seconds.
    # 0 when it was in step, or only a few steps behind: those ride in drafting's first forward.
    catch_up_tokens: int = 0
    catch_up_seconds: float = 0.0
    shadow: tuple[ShadowScore, ...] = ()  # other drafters' drafts scored this step
    # Drafts per row the verify computed, where a runtime verifies each row's own drafts only
    # (their mean, below `width` when rows found different lengths); None: `width` on every row.
    verified_width: float | None = None


class Runner(Protocol):
    model_key: str
    hardware_key: str
    max_batch: int
    max_spec_tokens: int
    methods: tuple[str, ...]  # the drafters it can run, by method; the first is the default
    eos_token_ids: frozenset[int]
    vocab_rows: int  # token ids a prompt may hold: the embedding table's rows, not len(tokenizer)

    def describe(self) -> str: ...

    def prefill(self, row_start: int, items: list[PrefillItem]) -> PrefillOutput:
        """Items fill rows [row_start, row_start + n); only the last may stop short of its end."""
        ...

    def decode(self, batch: int, k: int, method: str | None = None) -> DecodeOutput:
        """A step over rows [0, batch) drafting K tokens with `method` (None: the first drafter)."""
        ...

    @property
    def fuses_prompts(self) -> bool:
        """Whether `decode_with_prompts` saves anything over `prefill` then `decode(batch, 0)`."""
        ...

    def decode_with_prompts(self, batch: int, items: list[PrefillItem]) -> tuple[DecodeOutput, PrefillOutput]:
        """A plain step over rows [0, batch), and items into rows batch, batch + 1, ..., together."""
        ...

    def move_rows(self, srcs: list[int], dsts: list[int]) -> None: ...
