"""The learning policies `bench control` runs: our controller, and plain river UCB to compare with."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from adaptivespec.bench.oracle import Learner
from adaptivespec.bench.river_ucb import RiverBandit
from adaptivespec.bench.step_trace import StepTrace
from adaptivespec.controller.buckets import batch_bucket
from adaptivespec.controller.controller import SIM_METHODS, Controller
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.store.repository import Store

FLUSH_EVERY_STEPS = 2000


def adaptive(
    model_key: str,
    hardware_key: str,
    store: Store | None,
    methods: tuple[str, ...] = SIM_METHODS,
    trace: TextIO | None = None,
) -> tuple[Controller, Learner]:
    """Our controller over `methods`' arms; with a store it resumes what it learned and saves
    as it goes; with a `trace`, each step it learned from is written there (step_trace.py)."""
    controller = Controller(model_key, hardware_key, methods=methods)
    if store is not None:
        saved = store.load(model_key, hardware_key)
        if saved is not None:
            controller.restore(saved)
    traced = StepTrace(trace, controller) if trace is not None else None
    steps = 0

    def on_step(record: StepTelemetry) -> None:
        nonlocal steps
        controller.ingest(record)
        if traced is not None:
            traced(record)
        steps += 1
        if store is not None and steps % FLUSH_EVERY_STEPS == 0:
            flush(controller, store)

    return controller, Learner(controller.live, on_step)


def flush(controller: Controller, store: Store) -> None:
    unsaved = controller.take_unsaved()
    try:
        store.save(unsaved.state, unsaved.history)
    except Exception:
        controller.give_back(unsaved)
        raise


class PlainUCB:
    """river UCB per batch bucket over every arm, with no model, no pruning and no priors."""

    def __init__(self, arms: tuple[int, ...], seed: int = 0) -> None:
        self.arms = arms
        self.seed = seed
        self._bandits: dict[int, RiverBandit] = {}
        self._current: dict[int, int] = {}
        self._scale: dict[int, float] = {}

    def k_for(self, batch_size: int, context_len: int) -> int:
        bucket = batch_bucket(batch_size)
        if bucket not in self._current:
            self._current[bucket] = self._bandit(bucket).pull(self.arms)
        return self._current[bucket]

    def method_for(self, batch_size: int, context_len: int) -> str | None:
        return None  # it learns K alone, for the runner's first drafter

    def on_step(self, record: StepTelemetry) -> None:
        bucket = batch_bucket(record.batch_size)
        goodput = record.emitted / record.batch_size / record.step_seconds
        scale = self._scale.setdefault(bucket, goodput)
        bandit = self._bandit(bucket)
        bandit.update(record.k, goodput / scale)
        self._current[bucket] = bandit.pull(self.arms)

    def _bandit(self, bucket: int) -> RiverBandit:
        if bucket not in self._bandits:
            self._bandits[bucket] = RiverBandit("ucb", seed=self.seed + bucket)
        return self._bandits[bucket]


def plain_ucb(arms: tuple[int, ...]) -> Callable[[], Learner]:
    def make() -> Learner:
        policy = PlainUCB(arms)
        return Learner(policy, policy.on_step)

    return make
