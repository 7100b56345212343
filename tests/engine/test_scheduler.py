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


def test_a_long_prompt_goes_in_chunks_and_holds_the_row_after_the_batch() -> None:
    scheduler = Scheduler(max_batch=4, max_queued=10, max_prefill_tokens=100)
    decoding, long = _sequence(3), _sequence(50)
    for sequence in (decoding, long):
        scheduler.add(sequence)
    first = scheduler.admit(budget=20)
    assert [(c.sequence, c.start, c.end) for c in first.chunks] == [(decoding, 0, 3), (long, 0, 17)]
    assert scheduler.running == [decoding] and scheduler.partial is long and long.slot == 1
    assert scheduler.prefill_backlog == 50 - 17 and scheduler.prompts_waiting == 1
    second = scheduler.admit(budget=20)  # alone, it takes the whole budget
    assert [(c.sequence, c.start, c.end) for c in second.chunks] == [(long, 17, 37)]
    assert second.sequences == [] and second.moves.srcs == []
    third = scheduler.admit(budget=20)  # the long prompt completes
    assert [(c.sequence, c.start, c.end) for c in third.chunks] == [(long, 37, 50)]
    assert third.row_start == 1 and scheduler.running == [decoding, long]
    assert scheduler.partial is None


def test_a_short_prompt_overtakes_a_chunked_one_which_still_advances() -> None:
    """A prompt queued behind a long one that is fed in chunks goes in whole, ahead of it, when
    it fits in the budget less the long one's least chunk; the long one moves up a row past it
    and takes the rest of the budget."""
    scheduler = Scheduler(max_batch=4, max_queued=10, max_prefill_tokens=100)
    decoding, long, short, later = _sequence(3), _sequence(100), _sequence(20), _sequence(12)
    for sequence in (decoding, long, short, later):
        scheduler.add(sequence)
    scheduler.admit(budget=20)  # decoding whole, then 17 tokens of the long prompt at row 1
    # 30 tokens less the long one's least chunk (16) leave 14: too few for the short prompt.
    assert [(c.sequence, c.start, c.end) for c in scheduler.admit(budget=30).chunks] == [(long, 17, 47)]
    # 40 less 16 leave 24: the short prompt fits, the next (12 more) does not, so it waits its
    # turn, and the long one takes 40 - 20.
    second = scheduler.admit(budget=40)
    assert [(c.sequence, c.start, c.end) for c in second.chunks] == [(short, 0, 20), (long, 47, 67)]
    assert (second.moves.srcs, second.moves.dsts) == ([1], [2]) and long.slot == 2 and short.slot == 1
    assert second.row_start == 1 and second.sequences == [short]
    assert scheduler.running == [decoding, short] and scheduler.partial is long
    assert list(scheduler.waiting) == [later]
    third = scheduler.admit(budget=50)  # the long one completes and the next fits after it
    assert [(c.sequence, c.start, c.end) for c in third.chunks] == [(long, 67, 100), (later, 0, 12)]
    assert third.moves.srcs == [] and scheduler.running == [decoding, short, long, later]


def test_a_small_budget_keeps_half_for_the_chunked_prompt() -> None:
    scheduler = Scheduler(max_batch=4, max_queued=10, max_prefill_tokens=100)
    long, one, two = _sequence(30), _sequence(1), _sequence(2)
    for sequence in (long, one, two):
        scheduler.add(sequence)
    scheduler.admit(budget=5)
    admission = scheduler.admit(budget=5)  # 5 less 3 leave 2: the first short prompt only
    assert [(c.sequence, c.start, c.end) for c in admission.chunks] == [(one, 0, 1), (long, 5, 9)]


def test_overtaking_leaves_the_chunked_prompt_a_row_inside_the_batch() -> None:
    scheduler = Scheduler(max_batch=3, max_queued=10, max_prefill_tokens=100)
    long, shorts = _sequence(60), [_sequence(2) for _ in range(3)]
    for sequence in (long, *shorts):
        scheduler.add(sequence)
    scheduler.admit(budget=20)  # row 0: the long prompt, part-way
    admission = scheduler.admit(budget=30)  # 3 rows: two short prompts, and the long one after them
    assert [c.sequence for c in admission.chunks] == [shorts[0], shorts[1], long]
    assert long.slot == 2 and list(scheduler.waiting) == [shorts[2]]


def test_the_partial_row_follows_the_batch_down_and_is_dropped_when_aborted() -> None:
    scheduler = Scheduler(max_batch=4, max_queued=10, max_prefill_tokens=100)
    a, b, long = _sequence(3), _sequence(3), _sequence(60)
    for sequence in (a, b, long):
        scheduler.add(sequence)
    scheduler.admit(budget=30)  # a and b whole, then 24 tokens of the long prompt at row 2
    assert long.slot == 2 and long.prefilled == 24
    a.fail("stop")
    moves = scheduler.compact()  # b moves into row 0, the partial into row 1 (b's old row)
    assert (moves.srcs, moves.dsts) == ([1, 2], [0, 1])
    assert b.slot == 0 and long.slot == 1
    long.abort()
    assert scheduler.compact().srcs == [] and scheduler.partial is None
    assert long.finished and long.events.get_nowait().finish_reason == "abort"


def test_no_prompt_starts_behind_another_on_a_sliver_of_budget() -> None:
    scheduler = Scheduler(max_batch=4, max_queued=10, max_prefill_tokens=100)
    for length in (15, 40):
        scheduler.add(_sequence(length))
    admission = scheduler.admit(budget=20)  # 5 tokens left: too few to start the 40-token prompt
    assert [c.end for c in admission.chunks] == [15] and scheduler.partial is None
