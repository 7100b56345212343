"""Continuous batching: which requests run, in which KV-cache row, and who waits.

Running sequences always occupy rows [0, B). When some leave, survivors from the tail move
into the holes (disjoint destination rows; the runner copies in one go, reading before it
writes). A prompt longer than a step's prefill budget is fed in chunks over several steps;
meanwhile it holds row B, outside the decoding batch, and decodes once its last chunk is in.
Prompts queued behind it that fit whole in the step's budget, less a least chunk for it, go
in first (the part-way prompt moves up a row for each): a short prompt does not wait out a
long one's chunks, which costs the long one only the short one's tokens.
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


# The smallest chunk that starts a prompt behind others in the same step (fewer tokens would
# buy a whole extra step of prefill for almost nothing), and the least a part-way prompt keeps
# of a step's budget when shorter ones overtake it.
MIN_CHUNK = 16


@dataclass(frozen=True, slots=True)
class PromptChunk:
    sequence: Sequence
    start: int  # prompt tokens already prefilled
    end: int

    @property
    def completes(self) -> bool:
        return self.end == len(self.sequence.prompt_ids)


@dataclass(frozen=True, slots=True)
class Admission:
    row_start: int
    chunks: list[PromptChunk]  # rows row_start, row_start + 1, ...; only the last may not complete
    moves: RowMoves  # applied before the chunks are fed: a part-way prompt moving up past overtakers

    @property
    def sequences(self) -> list[Sequence]:
        """Those whose prompt is complete after this step: they join the decoding batch."""
        return [chunk.sequence for chunk in self.chunks if chunk.completes]


class Scheduler:
    def __init__(self, max_batch: int, max_queued: int, max_prefill_tokens: int) -> None:
        self.max_batch = max_batch
        self.max_queued = max_queued
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.partial: Sequence | None = None  # a prompt part-way through a chunked prefill, at row B

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.partial)

    @property
    def prompts_waiting(self) -> int:
        """Requests whose prompt is not fully prefilled yet, the one part-way through included."""
        return len(self.waiting) + (self.partial is not None)

    @property
    def prefill_backlog(self) -> int:
        """Prompt tokens still to prefill: the waiting requests', and the rest of a chunked one."""
        return sum(self.queued_tokens())

    def queued_tokens(self) -> list[int]:
        """The prompt tokens still to prefill of each prompt, in the order `admit` takes them
        (the one part-way through first)."""
        rest = [] if self.partial is None else [self._remaining(self.partial)]
        return rest + [len(s.prompt_ids) for s in self.waiting if not s.aborted]

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
        self._live_partial()  # an aborted part-way prompt gives up its row before seating
        seat = self._seat_partial(len(self.running))  # it follows the batch down
        return RowMoves(srcs + seat.srcs, dsts + seat.dsts)

    def admit(self, budget: int | None = None) -> Admission:
        """Feeds prompts into free rows, first come first served, within `budget` prompt tokens.

        The prompt that overflows the budget is fed as far as the budget allows and continues
        next step. While it does, the prompts queued behind it that fit whole in the budget, less
        a least chunk for it (MIN_CHUNK, or half a smaller budget), are fed first, in their
        order, and it takes the rest: a prompt that can complete goes before one that cannot,
        which lowers the time to first token summed over the prompts, and the long one still
        advances every step. `budget` is capped by max_prefill_tokens, which bounds a prefill's
        activations.
        """
        left = self.max_prefill_tokens if budget is None else max(1, min(budget, self.max_prefill_tokens))
        row_start = len(self.running)
        chunks = self._overtakers(left, row_start)
        left -= sum(c.end - c.start for c in chunks)
        moves = self._seat_partial(row_start + len(chunks))  # up past the overtakers, if any
        while row_start + len(chunks) < self.max_batch:
            sequence = self._next_prompt()
            starts = sequence is not None and sequence is not self.partial
            if sequence is None or (chunks and starts and left < min(MIN_CHUNK, self._remaining(sequence))):
                break
            start = sequence.prefilled
            end = min(len(sequence.prompt_ids), start + left)
            left -= end - start
            chunks.append(self._place(sequence, start, end, row_start + len(chunks)))
            if end < len(sequence.prompt_ids):
                break
        admission = Admission(row_start, chunks, moves)
        self.running.extend(admission.sequences)
        return admission

    def _overtakers(self, budget: int, row_start: int) -> list[PromptChunk]:
        """Queued prompts fed whole ahead of a part-way prompt that cannot complete in `budget`:
        from the head of the queue, while each fits in what the part-way prompt's least chunk
        leaves and a row remains for it after them."""
        partial = self._live_partial()
        if partial is None or self._remaining(partial) <= budget:
            return []
        spare = budget - min(MIN_CHUNK, -(-budget // 2))
        chunks: list[PromptChunk] = []
        self._drop_aborted()
        while self.waiting and row_start + len(chunks) + 1 < self.max_batch:
            length = len(self.waiting[0].prompt_ids)
            if length > spare:
                break
            spare -= length
            chunks.append(self._place(self.waiting[0], 0, length, row_start + len(chunks)))
        return chunks

    def _seat_partial(self, row: int) -> RowMoves:
        """Moves the part-way prompt, if there is one, to `row`: the row after the batch and
        after the prompts that complete ahead of it."""
        partial = self.partial
        if partial is None or partial.slot == row:
            return RowMoves([], [])
        src, partial.slot = partial.slot, row
        return RowMoves([src], [row])

    def _next_prompt(self) -> Sequence | None:
        """The partial prompt if there is one, else the first live request in the queue."""
        if self.partial is not None:
            return self.partial
        while self.waiting and self.waiting[0].aborted:
            self.waiting.popleft().fail("abort")
        return self.waiting[0] if self.waiting else None

    def _place(self, sequence: Sequence, start: int, end: int, row: int) -> PromptChunk:
        if sequence is not self.partial:
            self.waiting.popleft()
            sequence.slot = row
            sequence.status = Status.RUNNING
        sequence.prefilled = end
        chunk = PromptChunk(sequence, start, end)
        if not chunk.completes:
            self.partial = sequence
        elif sequence is self.partial:
            self.partial = None
        return chunk

    @staticmethod
    def _remaining(sequence: Sequence) -> int:
        return len(sequence.prompt_ids) - sequence.prefilled

    def _live_partial(self) -> Sequence | None:
        partial = self.partial
        if partial is not None and partial.aborted:
            partial.fail("abort")
        if partial is not None and partial.finished:  # aborted, or its chunk failed
            self.partial = partial = None
        return partial

    def _drop_aborted(self) -> None:
        for sequence in self.waiting:
            if sequence.aborted:
                sequence.fail("abort")
        self.waiting = deque(s for s in self.waiting if not s.aborted)

    def end_all(self, reason: str, error: str | None = None) -> None:
        """Ends every request: decoding, part-way through its prefill, and waiting."""
        for sequence in self.running:
            sequence.fail(reason, error)
        self.running.clear()
        if self.partial is not None:
            self.partial.fail(reason, error)
            self.partial = None
        while self.waiting:
            self.waiting.popleft().fail(reason, error)
