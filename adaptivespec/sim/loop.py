"""A closed-loop load generator over the simulator, with the batch state held in numpy arrays.

Each phase of the load schedule keeps `concurrency` requests decoding: a request that
finishes is replaced by a new one (prefilled on the same virtual clock). Every phase starts
from a steady-state mix of requests drawn from its own seeded streams, so two policies see
the same requests and the same acceptance draws wherever they pick the same K (common
random numbers), and the oracle sweep compares like with like.

This driver replaces the asyncio engine for benchmarking only: per-request Python objects
would cost milliseconds per step at batch 256, and a control benchmark runs ~10^5 steps.
The step math (roofline cost, acceptance) is the same that `SimRunner` gives the engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.telemetry import StepTelemetry, survival_counts
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.workload import Phase, Workload

StepSink = Callable[[StepTelemetry], None]


@dataclass(slots=True)
class PhaseResult:
    concurrency: int
    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    k_counts: dict[int, int] = field(default_factory=dict)
    arm_counts: dict[str, int] = field(default_factory=dict)  # steps per arm ("suffix:4", "off")
    itl_seconds: list[np.ndarray] = field(default_factory=list)  # per (row, step): step time / tokens
    itl_weights: list[np.ndarray] = field(default_factory=list)  # tokens behind each sample
    goodput_trace: list[float] = field(default_factory=list)  # tokens / second, per step
    # The machine's pace as each segment began (bench/machine_level.py): a reference step's seconds.
    levels: list[float] = field(default_factory=list)

    @property
    def goodput(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


class AcceptanceModel:
    """Per-request acceptance rates; a draft token is accepted with the request's own rate."""

    def __init__(self, workload: Workload) -> None:
        self.mean = workload.acceptance_mean
        self.concentration = workload.acceptance_concentration

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        if self.mean <= 0.0 or self.mean >= 1.0:
            return np.full(count, self.mean)
        c = self.concentration
        return rng.beta(self.mean * c, (1 - self.mean) * c, size=count)

    @staticmethod
    def accepted(alpha: np.ndarray, uniforms: np.ndarray, k: int) -> np.ndarray:
        """Leading accepted drafts: P(a >= j) = alpha^j, capped at K (inverse-CDF of a geometric)."""
        if k == 0:
            return np.zeros(alpha.shape, dtype=np.int64)
        safe = np.clip(alpha, 1e-12, 1 - 1e-12)
        return np.minimum(np.floor(np.log(uniforms) / np.log(safe)), k).astype(np.int64)


class SimLoop:
    def __init__(
        self,
        cost: StepCostModel,
        workload: Workload,
        seed: int,
        model_key: str,
        hardware_key: str,
        *,
        host: int = 0,
    ) -> None:
        self.cost = cost
        self.workload = workload
        self.seed = seed
        self.model_key = model_key
        self.hardware_key = hardware_key
        self.host = host  # whose requests: hosts behind one balancer serve different ones

    def for_host(self, host: int) -> SimLoop:
        """The same schedule with host `host`'s own requests and acceptance draws. Host 0's are
        this loop's, so a lone run and the first host of a fleet see the same requests."""
        return SimLoop(self.cost, self.workload, self.seed, self.model_key, self.hardware_key, host=host)

    def run(
        self,
        policy: SpecPolicy,
        on_step: StepSink | None = None,
        progress: Callable[[int], None] | None = None,
        order: Sequence[int] | None = None,
    ) -> list[PhaseResult]:
        results: list[PhaseResult] = []
        for _ in self.stepping(policy, results, on_step, progress, order):
            pass
        return results

    def stepping(
        self,
        policy: SpecPolicy,
        results: list[PhaseResult],
        on_step: StepSink | None = None,
        progress: Callable[[int], None] | None = None,
        order: Sequence[int] | None = None,
    ) -> Iterator[None]:
        """Runs the schedule one step per `next()`, appending each phase's result as it starts,
        so several loops can advance in lockstep (the fleet benchmark). `order` runs the phases
        in another order; each keeps its own seeded streams, so phase i sees the same requests
        and acceptance draws whatever its position."""
        acceptance = AcceptanceModel(self.workload)
        drift = sorted(self.workload.drift, key=lambda d: d.at_step)
        step = 0
        for index in order if order is not None else range(len(self.workload.load)):
            phase = self.workload.load[index]
            streams = (self._stream(index, 0), self._stream(index, 1))
            state = _Batch.steady(self.workload, acceptance, phase, streams)
            result = PhaseResult(phase.concurrency)
            results.append(result)
            for _ in range(phase.steps):
                while drift and drift[0].at_step <= step:
                    acceptance.mean = drift.pop(0).acceptance_mean
                    state.alpha = acceptance.draw(state.rng, phase.concurrency)
                self._step(policy, state, result, on_step)
                step += 1
                yield
            if progress is not None:
                progress(phase.steps)

    def _stream(self, phase: int, purpose: int) -> np.random.Generator:
        """Host 0 keeps the seed sequence of a loop without hosts, so earlier runs reproduce."""
        entropy = [self.seed, phase, purpose] + ([self.host] if self.host else [])
        return np.random.default_rng(entropy)

    def _step(self, policy: SpecPolicy, state: _Batch, result: PhaseResult, on_step: StepSink | None) -> None:
        batch = state.context.size
        total_context = float(state.context.sum())
        k = policy.k_for(batch, int(total_context / batch))
        cost = self.cost.step(batch, k, total_context)
        accepted = AcceptanceModel.accepted(state.alpha, state.uniforms.random(batch), k)
        emitted = np.minimum(accepted + 1, state.remaining)
        state.remaining -= emitted
        state.context += emitted
        tokens = int(emitted.sum())
        prefill = state.replace_finished(self.workload, self.cost)
        result.steps += 1
        result.tokens += tokens
        result.seconds += cost.step_seconds + prefill
        result.k_counts[k] = result.k_counts.get(k, 0) + 1
        result.itl_seconds.append(cost.step_seconds / emitted)
        result.itl_weights.append(emitted)
        result.goodput_trace.append(tokens / cost.step_seconds)
        if on_step is not None:
            on_step(
                StepTelemetry(
                    model_key=self.model_key,
                    hardware_key=self.hardware_key,
                    batch_size=batch,
                    k=k,
                    mean_context_len=total_context / batch,
                    drafted=k * batch,
                    accepted=int(accepted.sum()),
                    emitted=tokens,
                    draft_seconds=cost.draft_seconds,
                    verify_seconds=cost.verify_seconds,
                    step_seconds=cost.step_seconds,
                    timestamp=result.seconds,
                    width=k,
                    kept_at_least=survival_counts(accepted.tolist(), k),
                )
            )


@dataclass(slots=True)
class _Batch:
    rng: np.random.Generator  # request lengths and rates
    uniforms: np.random.Generator  # acceptance draws, one per row per step
    acceptance: AcceptanceModel
    context: np.ndarray  # [B] tokens held per request
    remaining: np.ndarray  # [B] tokens still to generate
    alpha: np.ndarray  # [B] acceptance rate per request

    @classmethod
    def steady(
        cls,
        workload: Workload,
        acceptance: AcceptanceModel,
        phase: Phase,
        streams: tuple[np.random.Generator, np.random.Generator],
    ) -> _Batch:
        """Requests caught mid-generation, as in a batch that has been running for a while."""
        rng = streams[0]
        count = phase.concurrency
        prompt = rng.integers(workload.prompt_len.min, workload.prompt_len.max + 1, count)
        total = rng.integers(workload.output_len.min, workload.output_len.max + 1, count)
        done = np.floor(rng.random(count) * total).astype(np.int64)
        return cls(rng, streams[1], acceptance, prompt + done, total - done, acceptance.draw(rng, count))

    def replace_finished(self, workload: Workload, cost: StepCostModel) -> float:
        """Swaps finished requests for new ones; returns the virtual seconds their prefill takes."""
        finished = np.flatnonzero(self.remaining == 0)
        if finished.size == 0:
            return 0.0
        prompt = self.rng.integers(workload.prompt_len.min, workload.prompt_len.max + 1, finished.size)
        self.context[finished] = prompt
        self.remaining[finished] = self.rng.integers(
            workload.output_len.min, workload.output_len.max + 1, finished.size
        )
        self.alpha[finished] = self.acceptance.draw(self.rng, finished.size)
        return cost.prefill_seconds(int(prompt.sum()), int(finished.size))


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    if values.size == 0:
        return math.nan
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    index = int(np.searchsorted(cumulative, q / 100 * cumulative[-1]))
    return float(values[order][min(index, values.size - 1)])
