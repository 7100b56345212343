"""Per-step telemetry records and the bounded, non-blocking bus that carries them.

The engine must never wait for a slow consumer: a full subscriber queue drops the record
and counts the drop, so a stalled controller costs telemetry, not throughput.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


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
