"""Continuous batching: which requests run, in which KV-cache row, and who waits.

Running sequences always occupy rows [0, B). When some leave, survivors from the tail move
into the holes (disjoint source and destination rows, so the runner can copy in one go).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from adaptivespec.engine.sequence import Sequence, Status
from adaptivespec.errors import QueueFullError


@dataclass(frozen=True, slots=True)
class RowMoves:
    srcs: list[int]
    dsts: list[int]


@dataclass(frozen=True, slots=True)
class Admission:
    row_start: int
    sequences: list[Sequence]


class Scheduler:
    def __init__(self, max_batch: int, max_queued: int, max_prefill_tokens: int) -> None:
        self.max_batch = max_batch
        self.max_queued = max_queued
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, sequence: Sequence) -> None:
        if len(self.waiting) >= self.max_queued:
            self._drop_aborted()  # a client that gave up does not hold a place in the queue
        if len(self.waiting) >= self.max_queued:
            raise QueueFullError(
                f"the waiting queue is full ({self.max_queued} requests); retry later or raise max_queued"
            )
        self.waiting.append(sequence)

    def compact(self) -> RowMoves:
        """Drops finished and aborted sequences from the batch and fills their rows."""
        for sequence in self.running:
            if sequence.aborted and not sequence.finished:
                sequence.fail("abort")
        keep = len(self.running) - sum(1 for s in self.running if s.finished)
        holes = [s.slot for s in self.running[:keep] if s.finished]
        movers = [s for s in self.running[keep:] if not s.finished]
        srcs, dsts = [], []
        survivors = [s for s in self.running[:keep] if not s.finished]
        for sequence, hole in zip(movers, holes, strict=True):
            srcs.append(sequence.slot)
            dsts.append(hole)
            sequence.slot = hole
        self.running = sorted(survivors + movers, key=lambda s: s.slot)
        return RowMoves(srcs, dsts)

    def admit(self) -> Admission:
        """Moves waiting sequences into free rows, within the prefill token budget."""
        row_start = len(self.running)
        admitted: list[Sequence] = []
        budget = self.max_prefill_tokens
        while self.waiting and row_start + len(admitted) < self.max_batch:
            head = self.waiting[0]
            if head.aborted:
                self.waiting.popleft().fail("abort")
                continue
            if admitted and len(head.prompt_ids) > budget:
                break
            budget -= len(head.prompt_ids)
            sequence = self.waiting.popleft()
            sequence.slot = row_start + len(admitted)
            sequence.status = Status.RUNNING
            admitted.append(sequence)
        self.running.extend(admitted)
        return Admission(row_start, admitted)

    def _drop_aborted(self) -> None:
        for sequence in self.waiting:
            if sequence.aborted:
                sequence.fail("abort")
        self.waiting = deque(s for s in self.waiting if not s.aborted)

    def drain_waiting(self, reason: str, error: str | None = None) -> None:
        while self.waiting:
            self.waiting.popleft().fail(reason, error)
