"""What the engine reports beyond its token streams: a finished request's completion, and the
running totals that metrics read."""

from __future__ import annotations

from dataclasses import dataclass

from adaptivespec.engine.sequence import SequenceStats


@dataclass(frozen=True, slots=True)
class Completion:
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    stats: SequenceStats


@dataclass(slots=True)
class EngineTotals:
    """Running totals for metrics, counted where they happen (telemetry may drop records)."""

    prompt_tokens: int = 0  # of admitted requests, when they are admitted
    generation_tokens: int = 0  # tokens requests kept: none past a stop condition
    overlapped_steps: int = 0  # decode steps submitted while the previous one's tokens streamed
    steps_with_prompts: int = 0  # decode steps that carried prompt chunks (not in telemetry)
