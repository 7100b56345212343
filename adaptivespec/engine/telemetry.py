"""Per-step telemetry records and the bounded, non-blocking bus that carries them.

The engine must never wait for a slow consumer: a full subscriber queue drops the record
and counts the drop, so a stalled controller costs telemetry, not throughput.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from itertools import accumulate

from adaptivespec.engine.runner import DecodeOutput, ShadowScore


@dataclass(frozen=True, slots=True)
class StepTelemetry:
    model_key: str
    hardware_key: str
    batch_size: int  # decoding sequences only; prefill is not counted
    k: int  # draft length the policy chose (0 = speculation off); what the step is credited to
    mean_context_len: float
    drafted: int
    accepted: int
    emitted: int
    draft_seconds: float
    verify_seconds: float
    step_seconds: float
    timestamp: float  # time.time() at the end of the step
    width: int  # drafts verified per row (0 = a plain step); below k when the drafter found fewer
    kept_at_least: tuple[int, ...]  # [j - 1]: rows that kept >= j drafts, j = 1..width
    # The switch cost within this step: a drafter that sat out a spell at K = 0 catching up, in
    # a forward of its own, on the tokens it missed (its seconds are part of draft_seconds and
    # step_seconds). A few steps' worth ride in drafting's first forward and are not counted.
    catch_up_tokens: int = 0
    catch_up_seconds: float = 0.0
    method: str = ""  # the drafter the step ran ("ngram", "draft", "suffix", "eagle3"); "" at K = 0
    # Other drafters' drafts of earlier steps, scored against what the target since wrote
    # (shadow_drafts.py): their acceptance, learned without running them.
    shadow: tuple[ShadowScore, ...] = ()
    # Drafts per row the verify computed where a runtime verifies each row's own drafts only
    # (their mean); None: `width`, on every row. What the step's cost follows.
    verified_width: float | None = None


def decode_record(
    out: DecodeOutput, *, model_key: str, hardware_key: str, batch_size: int, context: float, emitted: int
) -> StepTelemetry:
    """The record of one decode step; `emitted` is what the requests kept (none past a stop)."""
    return StepTelemetry(
        model_key=model_key,
        hardware_key=hardware_key,
        batch_size=batch_size,
        k=out.k,
        method=out.method,
        mean_context_len=context,
        drafted=sum(out.drafted),
        accepted=sum(out.accepted),
        emitted=emitted,
        draft_seconds=out.draft_seconds,
        verify_seconds=out.verify_seconds,
        step_seconds=out.step_seconds,
        timestamp=time.time(),
        width=out.width,
        kept_at_least=survival_counts(out.accepted, out.width),
        catch_up_tokens=out.catch_up_tokens,
        catch_up_seconds=out.catch_up_seconds,
        shadow=out.shadow,
        verified_width=out.verified_width,
    )


def survival_counts(accepted: list[int], k: int) -> tuple[int, ...]:
    """Rows that kept at least j drafts, for j = 1..k (index j - 1), in O(rows + k)."""
    histogram = [0] * (k + 1)
    for a in accepted:
        histogram[min(a, k)] += 1
    at_least = list(accumulate(reversed(histogram)))[::-1]  # at_least[j] = rows with >= j
    return tuple(at_least[1:])


class Subscription:
    def __init__(self, maxsize: int) -> None:
        self.queue: asyncio.Queue[StepTelemetry] = asyncio.Queue(maxsize)
        self.dropped = 0

    async def get(self) -> StepTelemetry:
        return await self.queue.get()

    def offer(self, record: StepTelemetry) -> None:
        try:
            self.queue.put_nowait(record)
        except asyncio.QueueFull:
            self.dropped += 1


class TelemetryBus:
    def __init__(self, queue_size: int) -> None:
        self._queue_size = queue_size
        self._subscribers: list[Subscription] = []
        self.published = 0

    def subscribe(self, maxsize: int | None = None) -> Subscription:
        subscription = Subscription(maxsize or self._queue_size)
        self._subscribers.append(subscription)
        return subscription

    @property
    def dropped(self) -> int:
        return sum(s.dropped for s in self._subscribers)

    def publish(self, record: StepTelemetry) -> None:
        self.published += 1
        for subscription in self._subscribers:
            subscription.offer(record)
