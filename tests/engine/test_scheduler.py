from __future__ import annotations

import pytest

from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.scheduler import Scheduler
from adaptivespec.engine.sequence import Sequence
from adaptivespec.engine.tokenizer import ByteTokenizer
from adaptivespec.errors import QueueFullError


def _sequence(prompt_len: int = 3) -> Sequence:
    return Sequence(
        list(range(prompt_len)), SamplingParams(), seed=0, max_context=64, tokenizer=ByteTokenizer()
    )


def test_rows_stay_dense_when_sequences_leave() -> None:
    scheduler = Scheduler(max_batch=6, max_queued=10, max_prefill_tokens=100)
    sequences = [_sequence() for _ in range(6)]
    for s in sequences:
        scheduler.add(s)
    admission = scheduler.admit()
    assert admission.row_start == 0 and [s.slot for s in admission.sequences] == list(range(6))
    sequences[1].fail("abort")
    sequences[4].abort()
    sequences[5].fail("stop")
    moves = scheduler.compact()
    assert [s.slot for s in scheduler.running] == [0, 1, 2]
    assert moves.srcs == [3] and moves.dsts == [1]
    assert sequences[3].slot == 1


def test_admission_respects_batch_and_prefill_budget() -> None:
    scheduler = Scheduler(max_batch=4, max_queued=10, max_prefill_tokens=10)
    for length in (6, 5, 2, 1, 1):
        scheduler.add(_sequence(length))
    assert len(scheduler.admit().sequences) == 1  # 6 + 5 > 10
    assert len(scheduler.admit().sequences) == 3  # 5 + 2 + 1, then the batch is full
    assert len(scheduler.waiting) == 1


def test_queue_limit() -> None:
    scheduler = Scheduler(max_batch=1, max_queued=1, max_prefill_tokens=10)
    scheduler.add(_sequence())
    with pytest.raises(QueueFullError):
        scheduler.add(_sequence())


def test_aborted_requests_do_not_hold_places_in_the_queue() -> None:
    scheduler = Scheduler(max_batch=1, max_queued=2, max_prefill_tokens=100)
    gone = [_sequence(), _sequence()]
    for sequence in gone:
        scheduler.add(sequence)
    with pytest.raises(QueueFullError):
        scheduler.add(_sequence())
    gone[0].abort()  # the client disconnected while queued
    scheduler.add(_sequence())
    assert gone[0].finished and gone[0].events.get_nowait().finish_reason == "abort"
    assert len(scheduler.waiting) == 2
