"""Roofline pricing of one decode step: K draft forwards plus one target verify forward.

forward = forward_overhead + tp_communication + max(bytes / bandwidth, flops / compute)
step    = step_overhead + (K > 0: K draft forwards) + target forward over K+1 tokens per row

A pure roofline keeps speculation profitable well past batch 64 for an 8B/1B pair on an
H100, because KV-cache reads keep the verify pass memory-bound. The crossovers seen in
real stacks come from the fixed per-step and per-forward costs, which is why they are
explicit terms here (docs/simulator.md says where each value comes from).
"""

from __future__ import annotations

from dataclasses import dataclass

from adaptivespec.sim.specs import HardwareSpec, ModelSpec


@dataclass(frozen=True, slots=True)
class StepCost:
    draft_seconds: float
    verify_seconds: float
    step_seconds: float


class StepCostModel:
    def __init__(self, hardware: HardwareSpec, target: ModelSpec, draft: ModelSpec | None) -> None:
        self.hardware = hardware
        self.target = target
        self.draft = draft
        gpus = hardware.num_gpus
        self._bandwidth = hardware.mem_bandwidth_gbps * 1e9 * hardware.bandwidth_efficiency * gpus
        self._compute = hardware.peak_tflops * 1e12 * hardware.efficiency * gpus
        self._step_overhead = hardware.step_overhead_us * 1e-6

    def forward_seconds(self, model: ModelSpec, batch: int, tokens: int, total_context: float) -> float:
        """`tokens` new tokens for each of `batch` rows, which hold `total_context` cached tokens in all."""
        new = batch * tokens
        bytes_moved = model.weight_bytes + (total_context + new) * model.kv_bytes_per_token
        flops = 2 * model.params * new + model.attention_flops_per_token_per_context * tokens * total_context
        return self._fixed(model) + max(bytes_moved / self._bandwidth, flops / self._compute)

    def step(self, batch: int, k: int, total_context: float) -> StepCost:
        draft = 0.0
        if k > 0 and self.draft is not None:
            draft = sum(
                self.forward_seconds(self.draft, batch, 1, total_context + j * batch) for j in range(k)
            )
        verify = self.forward_seconds(self.target, batch, k + 1, total_context)
        return StepCost(draft, verify, self._step_overhead + draft + verify)

    def prefill_seconds(self, prompt_tokens: int, rows: int) -> float:
        """Prefill of `rows` new requests holding `prompt_tokens` in all (target and draft)."""
        if rows == 0:
            return 0.0
        models = [self.target] + ([self.draft] if self.draft is not None else [])
        return sum(self._prefill(m, prompt_tokens, rows) for m in models)

    def _prefill(self, model: ModelSpec, prompt_tokens: int, rows: int) -> float:
        mean = prompt_tokens / rows
        flops = (
            2 * model.params * prompt_tokens
            + model.attention_flops_per_token_per_context * prompt_tokens * mean / 2
        )
        bytes_moved = model.weight_bytes + prompt_tokens * model.kv_bytes_per_token
        return self._fixed(model) + max(bytes_moved / self._bandwidth, flops / self._compute)

    def _fixed(self, model: ModelSpec) -> float:
        hw = self.hardware
        communication = 2 * model.layers * hw.allreduce_us if hw.num_gpus > 1 else 0.0
        return (hw.forward_overhead_us + communication) * 1e-6
