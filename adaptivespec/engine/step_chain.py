"""Decode steps that follow one another on the compute thread, without a round trip to the loop.

While nothing can change the batch, the next step may start as soon as the last one ends
(`overlap`). Deciding that on the event loop costs two thread wake-ups between steps: the
loop's, to see the result, and then the compute thread's, to start the next step. At batch 1
on the 2-core CPU that was 0.37 ms of every 12.7 ms step (docs/benchmarks.md, "Batch-1
framework overhead"). A chain decides on the compute thread instead, from what it can know
there without the loop: each row's token budget, which tokens end a row, and whether the
loop has closed the chain because a request arrived or left.

The loop still streams every step's tokens, in order, while the next step runs. A chain
that is two results ahead of the loop waits for it, so a busy loop falls at most one step
further behind than when it started each step itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from adaptivespec.engine.runner import DecodeOutput

KForContext = Callable[[int, int], int]  # (batch size, context tokens) -> K, read live from the policy


@dataclass(frozen=True, slots=True)
class RowLimit:
    """What the compute thread needs to tell, from token ids alone, whether a row may end."""

    room: int | None  # tokens the row may still take before its length limit; None: may end at any token
    ends_on_eos: bool
    length: int  # prompt and output tokens in the row


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One step's output, and the step the chain started after it, if any."""

    out: DecodeOutput
    next: Future[ChainLink] | None
    next_context: float  # mean tokens per row before the next step


class StepChain:
    """Runs decode steps over one unchanged batch until a row may end or the loop closes it."""

    def __init__(
        self,
        decode: Callable[[int, int], DecodeOutput],
        k_for: KForContext,
        limits: list[RowLimit],
        eos_ids: frozenset[int],
    ) -> None:
        self._decode = decode
        self._k_for = k_for
        self._room = [limit.room for limit in limits]
        self._ends_on_eos = [limit.ends_on_eos for limit in limits]
        self._lengths = [limit.length for limit in limits]
        self._eos_ids = eos_ids
        self._open = threading.Event()
        self._open.set()
        self._taken = threading.Semaphore(1)  # steps that may start before the loop takes another result

    def close(self) -> None:
        """From the loop: no step starts after the one running now."""
        self._open.clear()
        self._taken.release()  # a chain waiting for the loop wakes, sees it closed, and ends

    def taken(self) -> None:
        """From the loop: it has taken one step's result."""
        self._taken.release()

    def run(self, result: Future[ChainLink], k: int) -> None:
        """On the compute thread: step after step, each into its own future, until the chain ends."""
        while result.set_running_or_notify_cancel():  # False once the loop stopped waiting for it
            try:
                link = self._step(k)
                if link.next is not None:
                    k = self._k_for(len(self._lengths), int(link.next_context))
            except BaseException as exc:  # the loop receives whatever failed, as from the executor
                result.set_exception(exc)
                return
            result.set_result(link)
            if link.next is None:
                return
            result = link.next

    def _step(self, k: int) -> ChainLink:
        out = self._decode(len(self._lengths), k)
        goes_on = self._rows_go_on(out.tokens) and self._loop_keeps_up()
        return ChainLink(out, Future() if goes_on else None, sum(self._lengths) / len(self._lengths))

    def _rows_go_on(self, tokens: list[list[int]]) -> bool:
        """Adds the step's tokens to each row's count; False once any row could end with them."""
        goes_on = True
        for row, row_tokens in enumerate(tokens):
            self._lengths[row] += len(row_tokens)
            room = self._room[row]
            if room is None:
                goes_on = False
                continue
            self._room[row] = room - len(row_tokens)
            if room <= len(row_tokens) or (
                self._ends_on_eos[row] and not self._eos_ids.isdisjoint(row_tokens)
            ):
                goes_on = False
        return goes_on

    def _loop_keeps_up(self) -> bool:
        """Waits, if it must, until the loop has taken the result before this one."""
        if not self._open.is_set():
            return False
        self._taken.acquire()
        return self._open.is_set()
