"""Threads left to the engine follow the CPUs other processes leave free; a number asked for is kept."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import pytest
import torch

from adaptivespec.bench.background_load import BackgroundLoad
from adaptivespec.engine.hardware import usable_cpu_ids, usable_cpus
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.thread_governor import PROC_STAT, CpuTimes, ThreadGovernor, read_cpu_times

from ..conftest import TinyPair, engine_config


@pytest.fixture
def torch_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _scripted(others: list[float], cpus: int = 2) -> tuple[ThreadGovernor, list[int]]:
    """A governor fed one reading per settle(): each second, `others[i]` cores of other work
    beside one core of ours."""
    readings = iter(
        [CpuTimes(0.0, 0.0, 0.0)]
        + [CpuTimes(i + 1.0, sum(others[: i + 1]) + i + 1.0, i + 1.0) for i in range(len(others))]
    )
    applied: list[int] = []
    governor = ThreadGovernor(cpus, lambda: next(readings), every=0.0, apply=applied.append)
    return governor, applied


def test_a_busy_core_takes_a_thread_after_two_readings_agree() -> None:
    governor, applied = _scripted([1.0, 0.0, 1.0, 0.9, 0.9, 0.3, 0.0])
    counts = [governor.settle() for _ in range(7)]
    # one reading alone (a burst) moves nothing; with 0.3 of a core taken, two threads still pay
    assert counts == [2, 2, 2, 1, 1, 1, 2]
    assert applied == [1, 2]
    assert governor.others == pytest.approx(0.0)


def test_the_count_stays_within_one_and_the_usable_cpus() -> None:
    governor, applied = _scripted([3.0, 3.0, 3.0], cpus=4)
    assert [governor.settle() for _ in range(3)] == [4, 1, 1]
    governor, applied = _scripted([5.0, 5.0], cpus=2)
    assert [governor.settle() for _ in range(2)] == [2, 1] and applied == [1]


def test_no_reading_leaves_the_ceiling() -> None:
    governor = ThreadGovernor(2, lambda: None, every=0.0, apply=lambda n: pytest.fail("resized"))
    assert governor.settle() == 2


@pytest.mark.skipif(usable_cpus() < 2 or not PROC_STAT.exists(), reason="needs 2 CPUs and /proc/stat")
def test_another_process_on_a_core_takes_a_thread_and_gives_it_back(torch_threads: None) -> None:
    cpus = usable_cpu_ids()
    torch.set_num_threads(len(cpus))
    governor = ThreadGovernor(len(cpus), partial(read_cpu_times, cpus), every=0.2)
    a = torch.randn(384, 384)

    def work_until(done: bool, seconds: float = 15.0) -> None:
        deadline = time.monotonic() + seconds
        while not done(governor.settle()) and time.monotonic() < deadline:
            for _ in range(20):
                a @ a  # our own work on every thread, as a step's matmuls are

    with BackgroundLoad(len(cpus) - 1):
        work_until(lambda threads: threads < len(cpus))
        assert governor.threads < len(cpus) and torch.get_num_threads() == governor.threads
        assert governor.others >= 0.5
    work_until(lambda threads: threads == len(cpus))
    assert torch.get_num_threads() == governor.threads
    # every thread back, unless something else on this machine still keeps a core busy
    assert governor.threads == len(cpus) or governor.others >= 0.5


def test_the_runner_governs_threads_only_when_left_to_it(tiny_pair: TinyPair, torch_threads: None) -> None:
    config = replace(engine_config(tiny_pair, proposer="ngram"), threads=0)
    governed = load_runner(config, progress=False).runner
    assert governed.threads is not None and governed.threads.cpus == usable_cpus()
    assert load_runner(replace(config, threads=1), progress=False).runner.threads is None
