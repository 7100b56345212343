"""A chain of decode steps on a real compute thread, over scripted step outputs.

What a step emits is scripted, so that each test can put a row's end exactly where it wants;
the engine tests run chains over the real models.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from adaptivespec.engine.runner import DecodeOutput
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.sequence import Sequence
from adaptivespec.engine.step_chain import ChainLink, RowLimit, StepChain
from adaptivespec.engine.tokenizer import ByteTokenizer

EOS = frozenset({0})
WAIT = 10.0  # seconds; only reached if the chain hangs


class ScriptedSteps:
    """Each call emits the next scripted tokens per row, and records the K it was asked for."""

    def __init__(
        self, script: list[list[list[int]] | Exception], gate: threading.Event | None = None
    ) -> None:
        self._script: Iterator[list[list[int]] | Exception] = iter(script)
        self.ks: list[int] = []
        self.started = threading.Semaphore(0)
        self._gate = gate

    def __call__(self, batch: int, k: int) -> DecodeOutput:
        self.ks.append(k)
        self.started.release()
        if self._gate is not None and not self._gate.wait(WAIT):
            raise TimeoutError("the test never opened the gate")
        tokens = next(self._script)
        if isinstance(tokens, Exception):
            raise tokens
        assert len(tokens) == batch
        return DecodeOutput(tokens, [k] * batch, [len(t) - 1 for t in tokens], k, k, 0.0, 0.0, 0.001)


def _sequence(params: SamplingParams, max_context: int = 4096) -> Sequence:
    return Sequence([1, 2], params, seed=0, max_context=max_context, tokenizer=ByteTokenizer())


def _links(chain: StepChain, k: int = 2) -> list[ChainLink]:
    """Runs the chain on its own thread, taking each result as the loop would."""
    first: Future[ChainLink] = Future()
    links: list[ChainLink] = []
    with ThreadPoolExecutor(max_workers=1) as compute:
        compute.submit(chain.run, first, k)
        result: Future[ChainLink] | None = first
        while result is not None:
            links.append(result.result(timeout=WAIT))
            chain.taken()
            result = links[-1].next
    return links


@pytest.mark.parametrize(
    ("params", "max_context", "steps_run", "ends"),
    [
        (SamplingParams(max_tokens=6), 4096, 3, True),  # 2 + 2 tokens fit; the third step's reach 6
        (SamplingParams(max_tokens=100), 6, 2, True),  # 2 prompt tokens: the second step fills the context
        (SamplingParams(max_tokens=100), 4096, 4, True),  # the end-of-sequence token in the fourth
        (SamplingParams(max_tokens=10, ignore_eos=True), 4096, 5, True),  # the same token, ignored
        (SamplingParams(max_tokens=100, stop=("x",)), 4096, 1, False),  # only the text can tell
    ],
)
def test_a_chain_goes_on_only_while_no_row_can_end(
    params: SamplingParams, max_context: int, steps_run: int, ends: bool
) -> None:
    """Every step the chain went on past leaves the request running once its tokens are added."""
    script = [[[65, 66]], [[67, 68]], [[69, 70]], [[71, 0]], [[72, 73]]]
    sequence, steps = _sequence(params, max_context), ScriptedSteps(script)
    links = _links(StepChain(steps, lambda batch, context: 3, [sequence.limit()], EOS))
    assert len(links) == steps_run
    for link in links[:-1]:
        sequence.add_tokens(link.out.tokens[0], EOS)
        assert not sequence.finished
    sequence.add_tokens(links[-1].out.tokens[0], EOS)
    assert sequence.finished == ends
    assert steps.ks == [2] + [3] * (steps_run - 1)  # the first K is the loop's, the rest the policy's


def test_the_next_step_takes_the_policy_s_k_for_the_grown_context() -> None:
    contexts: list[int] = []

    def k_for(batch: int, context: int) -> int:
        contexts.append(context)
        return 1

    rows = [RowLimit(room=4, ends_on_eos=True, length=10), RowLimit(room=100, ends_on_eos=True, length=20)]
    steps = ScriptedSteps([[[5], [6, 7, 8]], [[9, 10], [11]], [[12], [13]]])
    links = _links(StepChain(steps, k_for, rows, EOS))
    assert [link.next_context for link in links] == [17.0, 18.5, 19.5]
    assert contexts == [17, 18]  # asked before each step that followed


def test_closing_the_chain_ends_it_after_the_step_in_flight() -> None:
    gate = threading.Event()
    steps = ScriptedSteps([[[65]]] * 3, gate)
    chain = StepChain(steps, lambda batch, context: 0, [RowLimit(100, True, 2)], EOS)
    first: Future[ChainLink] = Future()
    with ThreadPoolExecutor(max_workers=1) as compute:
        compute.submit(chain.run, first, 0)
        assert steps.started.acquire(timeout=WAIT)
        chain.close()  # a request arrived while the first step ran
        gate.set()
        assert first.result(timeout=WAIT).next is None
    assert len(steps.ks) == 1


def test_the_chain_runs_at_most_one_step_past_the_last_result_taken() -> None:
    """A loop that has not taken the first result holds the chain after the second step."""
    steps = ScriptedSteps([[[65]]] * 4)
    chain = StepChain(steps, lambda batch, context: 0, [RowLimit(100, True, 2)], EOS)
    first: Future[ChainLink] = Future()
    with ThreadPoolExecutor(max_workers=1) as compute:
        compute.submit(chain.run, first, 0)
        second = first.result(timeout=WAIT).next
        assert second is not None
        assert steps.started.acquire(timeout=WAIT) and steps.started.acquire(timeout=WAIT)
        assert not steps.started.acquire(timeout=0.3)  # no third step
        assert not second.done()  # the chain waits, its result in hand, for the loop
        chain.taken()  # the loop takes the first result
        third = second.result(timeout=WAIT).next
        assert third is not None and steps.started.acquire(timeout=WAIT)
        chain.close()
        assert third.result(timeout=WAIT).next is None
    assert len(steps.ks) == 3


def test_a_failed_step_reaches_the_loop_and_ends_the_chain() -> None:
    steps = ScriptedSteps([[[65]], RuntimeError("out of memory"), [[66]]])
    chain = StepChain(steps, lambda batch, context: 0, [RowLimit(100, True, 2)], EOS)
    first: Future[ChainLink] = Future()
    with ThreadPoolExecutor(max_workers=1) as compute:
        compute.submit(chain.run, first, 0)
        second = first.result(timeout=WAIT).next
        assert second is not None
        with pytest.raises(RuntimeError, match="out of memory"):
            second.result(timeout=WAIT)
    assert len(steps.ks) == 2


def test_a_step_the_loop_stopped_waiting_for_never_runs() -> None:
    steps = ScriptedSteps([[[65]]])
    chain = StepChain(steps, lambda batch, context: 0, [RowLimit(100, True, 2)], EOS)
    first: Future[ChainLink] = Future()
    first.cancel()
    chain.run(first, 0)
    assert steps.ks == []
