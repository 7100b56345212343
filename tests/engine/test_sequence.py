from __future__ import annotations

from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.sequence import Sequence
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


def test_may_finish_with_names_every_way_a_step_can_end_a_request() -> None:
    """What lets the engine start the next step early: a False must mean the request goes on."""

    def sequence(params: SamplingParams, max_context: int = 4096) -> Sequence:
        return Sequence([1, 2], params, seed=0, max_context=max_context, tokenizer=ByteTokenizer())

    eos = frozenset({0})
    plain = SamplingParams(max_tokens=5)
    assert not sequence(plain).may_finish_with([65, 66], eos)
    assert sequence(plain).may_finish_with([65, 0], eos)  # an end-of-sequence token
    assert not sequence(SamplingParams(max_tokens=5, ignore_eos=True)).may_finish_with([0], eos)
    assert sequence(plain).may_finish_with([65] * 5, eos)  # max_tokens reached
    assert sequence(plain, max_context=4).may_finish_with([65, 66], eos)  # the context is full
    assert sequence(SamplingParams(max_tokens=5, stop=("x",))).may_finish_with([65], eos)  # text decides
    aborted = sequence(plain)
    aborted.abort()
    assert aborted.may_finish_with([65], eos)
    # The check changes nothing: the tokens are added, and stream, afterwards.
    kept = sequence(plain)
    kept.may_finish_with([65, 66], eos)
    assert kept.add_tokens([65, 66], eos) == 2 and kept.events.get_nowait().text == "AB"
