from __future__ import annotations

from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.sequence import Sequence
from adaptivespec.engine.step_chain import RowLimit
from adaptivespec.engine.tokenizer import ByteTokenizer


def _stream(text: str, params: SamplingParams, per_step: int) -> tuple[str, list[str], str | None]:
    tokenizer = ByteTokenizer()
    sequence = Sequence([1], params, seed=0, max_context=4096, tokenizer=tokenizer)
    ids = tokenizer.encode(text)
    for start in range(0, len(ids), per_step):
        if sequence.finished:
            break
        sequence.add_tokens(ids[start : start + per_step], frozenset())
    events = [sequence.events.get_nowait() for _ in range(sequence.events.qsize())]
    return "".join(e.text for e in events), [e.text for e in events], events[-1].finish_reason


def test_multibyte_characters_are_never_split_across_events() -> None:
    text = "héllo wörld 😀 ok"
    for per_step in (1, 2, 3):
        joined, deltas, finish = _stream(text, SamplingParams(max_tokens=len(text.encode())), per_step)
        assert joined == text and finish == "length"
        assert not any("\ufffd" in d for d in deltas)


def test_stop_string_split_across_steps_is_cut_and_never_shown() -> None:
    params = SamplingParams(max_tokens=100, stop=("STOP",))
    joined, deltas, finish = _stream("abc ST0 def STOP ghi", params, per_step=2)
    assert joined == "abc ST0 def " and finish == "stop"  # nothing of "STOP" was ever streamed
    assert deltas[-1] == ""  # the final event only carries the finish reason


def test_a_request_s_limit_counts_its_room_from_both_length_limits() -> None:
    """What lets a chain of steps run on (step_chain.py); the chain's tests check it against
    `add_tokens`. Stop strings, and an abort, let a request end at any token."""

    def sequence(params: SamplingParams, max_context: int = 4096) -> Sequence:
        return Sequence([1, 2], params, seed=0, max_context=max_context, tokenizer=ByteTokenizer())

    plain = SamplingParams(max_tokens=5)
    assert sequence(plain).limit() == RowLimit(room=5, ends_on_eos=True, length=2)
    assert sequence(plain, max_context=4).limit().room == 2  # the context fills first
    assert not sequence(SamplingParams(max_tokens=5, ignore_eos=True)).limit().ends_on_eos
    assert sequence(SamplingParams(max_tokens=5, stop=("x",))).limit().room is None
    aborted = sequence(plain)
    aborted.abort()
    assert aborted.limit().room is None
    grown = sequence(plain)
    grown.add_tokens([65, 66], frozenset({0}))
    assert grown.limit() == RowLimit(room=3, ends_on_eos=True, length=4)
