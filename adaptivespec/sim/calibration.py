"""Calibration of the simulator's overhead terms against published measurements.

The roofline alone says how long the GPU must work; real stacks also spend time per step
(scheduling, sampling, detokenising, streaming) and per forward pass (launches, syncs).
Those two terms, and the achieved fraction of peak FLOP/s that decides when a verify pass
turns compute-bound, are fitted here to one published measurement with three observations
(A100, Llama-3.1-8B with a Llama-3.2-1B draft, vLLM), and then checked against another
publication. docs/simulator.md gives the figures, the sources and the residuals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.specs import HardwareSpec, ModelSpec


@dataclass(frozen=True, slots=True)
class PublishedPoint:
    source: str
    itl_plain_batch1_ms: float  # inter-token latency without speculation, one stream
    itl_spec_batch1_ms: float  # with speculation at K, one stream
    acceptance_rate: float  # accepted / drafted, as vLLM reports it
    k: int
    wins_at: int  # largest concurrency where speculation still paid
    loses_at: int  # smallest concurrency where it lost
    mean_context: int  # prompt plus half the output, in tokens


# tenstorrent/tt-inference-server PR #3699 (2026-05): vLLM on an NVIDIA A100, Llama-3.1-8B-Instruct
# with a Llama-3.2-1B-Instruct draft. ITL 16-17 ms without speculation, 7.75 / 8.17 ms with it
# (acceptance rate 0.644 / 0.589) at concurrency 1; speculation wins the throughput sweep except
# at concurrency 64. K is not stated; 3 is assumed, the value of vLLM's draft-model example
# (vllm-project/vllm PR #24322). Prompts average 75 tokens, outputs 128 or 512.
TT_A100_8B_1B = PublishedPoint(
    source="tenstorrent/tt-inference-server PR #3699",
    itl_plain_batch1_ms=16.5,
    itl_spec_batch1_ms=7.96,
    acceptance_rate=0.617,
    k=3,
    wins_at=32,
    loses_at=64,
    mean_context=235,
)


def token_acceptance(acceptance_rate: float, k: int) -> float:
    """Per-token rate alpha whose expected accepted drafts sum(alpha^j, j=1..K) equal rate * K."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**j for j in range(1, k + 1)) < acceptance_rate * k:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def expected_tokens(alpha: float, k: int) -> float:
    """E(a, K) = (1 - a^(K+1)) / (1 - a): tokens emitted per row per step."""
    return float(k + 1) if alpha >= 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)


def goodput(cost: StepCostModel, batch: int, k: int, alpha: float, context: int) -> float:
    """Steady-state tokens per second of a batch, from the step cost alone (no prefill)."""
    step = cost.step(batch, k, float(batch * context)).step_seconds
    return batch * expected_tokens(alpha, k) / step


@dataclass(frozen=True, slots=True)
class Calibration:
    step_overhead_us: float
    forward_overhead_us: float
    efficiency: float
    alpha: float


def calibrate(
    hardware: HardwareSpec, target: ModelSpec, draft: ModelSpec, point: PublishedPoint
) -> Calibration:
    """Solves the two batch-1 latencies for the overheads, then the crossover for efficiency.

    Plain:  ITL_plain          = S + F + T_target(1 token)
    Spec:   ITL_spec * E(a, K) = S + K (F + T_draft) + F + T_target(K+1 tokens)
    """
    bare = StepCostModel(replace(hardware, step_overhead_us=0.0, forward_overhead_us=0.0), target, draft)
    ctx = float(point.mean_context)
    t_plain = bare.forward_seconds(target, 1, 1, ctx)
    t_verify = bare.forward_seconds(target, 1, point.k + 1, ctx)
    t_draft = sum(bare.forward_seconds(draft, 1, 1, ctx + j) for j in range(point.k))
    alpha = token_acceptance(point.acceptance_rate, point.k)
    plain = point.itl_plain_batch1_ms / 1000 - t_plain  # S + F
    spec = (
        point.itl_spec_batch1_ms / 1000 * expected_tokens(alpha, point.k) - t_draft - t_verify
    )  # S + (K+1) F
    forward = (spec - plain) / point.k
    step = plain - forward
    calibrated = replace(hardware, step_overhead_us=step * 1e6, forward_overhead_us=forward * 1e6)
    efficiency = _efficiency_for_crossover(calibrated, target, draft, point, alpha)
    return Calibration(step * 1e6, forward * 1e6, efficiency, alpha)


def _efficiency_for_crossover(
    hardware: HardwareSpec, target: ModelSpec, draft: ModelSpec, point: PublishedPoint, alpha: float
) -> float:
    """Efficiency at which speculation at K breaks even midway (geometrically) between wins and losses."""
    batch = round(math.sqrt(point.wins_at * point.loses_at))

    def gain(efficiency: float) -> float:
        cost = StepCostModel(replace(hardware, efficiency=efficiency), target, draft)
        return goodput(cost, batch, point.k, alpha, point.mean_context) / goodput(
            cost, batch, 0, alpha, point.mean_context
        )

    lo, hi = 0.01, 1.0  # gain rises with efficiency
    for _ in range(60):
        mid = (lo + hi) / 2
        if gain(mid) < 1.0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
