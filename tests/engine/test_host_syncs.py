"""A decode step reads the device at most twice, so that a GPU never waits on the host.

On cpu every tensor method that hands a device value to Python is wrapped and counted
during the step (the n-gram proposer and the row lengths live in numpy on the host, so
they are not device reads), except inside a path the engine takes only for cpu tensors
(`CPU_ONLY`: the tokens' argmax through numpy), which a GPU's step never runs. On cuda the
driver's own check, `set_sync_debug_mode`, counts every synchronising call as well,
including those inside torch that no wrapper sees.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SamplingParams

from ..conftest import TinyPair, engine_config

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy", "cpu")
MAX_READS_PER_STEP = 2
CPU_ONLY = frozenset({"last_argmax"})  # functions whose reads happen only on cpu tensors
PROMPTS = [[5, 6, 7, 8, 5, 6, 7], [9, 10, 11], [12, 13, 14, 15, 16, 12, 13], [20, 21]]
GREEDY = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
SAMPLED = SamplingParams(max_tokens=64, temperature=0.8, top_p=0.9, ignore_eos=True)


@contextmanager
def counted_reads() -> Iterator[list[str]]:
    """Names of the device reads made inside the block, in order."""
    reads: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def counting(name: str) -> Any:
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not (self.device.type == "cpu" and _called_from(CPU_ONLY)):
                reads.append(name)
            return originals[name](self, *args, **kwargs)

        return read

    for name in READS:
        setattr(torch.Tensor, name, counting(name))
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            yield reads
            if cuda:
                torch.cuda.synchronize()  # not counted: sync debug mode is reset below first
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    reads.extend(f"cuda: {w.message}" for w in caught if "synchroniz" in str(w.message))


def _called_from(names: frozenset[str]) -> bool:
    frame = sys._getframe(2)  # the caller of the wrapped method
    while frame is not None:
        if frame.f_code.co_name in names:
            return True
        frame = frame.f_back
    return False


def _runner(pair: TinyPair, proposer: str) -> HFRunner:
    runner = load_runner(engine_config(pair, proposer), progress=False).runner
    assert isinstance(runner, HFRunner)
    return runner


def _reads_per_step(runner: HFRunner, params: SamplingParams, k: int, steps: int) -> list[list[str]]:
    runner.prefill(0, [PrefillItem(prompt, params, seed=row) for row, prompt in enumerate(PROMPTS)])
    per_step = []
    for _ in range(steps):
        with counted_reads() as reads:
            runner.decode(len(PROMPTS), k)
        per_step.append(reads)
    return per_step


@pytest.mark.parametrize("proposer", ["draft", "ngram"])
@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("k", [0, 3])
def test_a_decode_step_reads_the_device_at_most_twice(
    tiny_pair: TinyPair, proposer: str, params: SamplingParams, k: int
) -> None:
    per_step = _reads_per_step(_runner(tiny_pair, proposer), params, k, steps=6)
    worst = max(per_step, key=len)
    assert len(worst) <= MAX_READS_PER_STEP, worst
    assert all(len(reads) >= 1 for reads in per_step)  # the tokens come back: the wrapper sees it


def test_the_counter_sees_a_read_the_step_should_not_make(tiny_pair: TinyPair) -> None:
    """The wrapper must catch the reads it exists to forbid, such as `int(t.max())`."""
    with counted_reads() as reads:
        width = int(torch.tensor([3, 1]).max())
        bool(torch.tensor([True]).all())
    assert width == 3
    assert reads == ["__int__", "__bool__"]
