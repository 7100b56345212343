from __future__ import annotations

import itertools

import pytest

from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel


@pytest.mark.parametrize("hardware", list(specs.HARDWARE_PRESETS))
def test_cost_is_monotone_in_batch_tokens_and_context(hardware: str) -> None:
    cost = StepCostModel(specs.hardware(hardware), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))
    target = cost.target
    batches, tokens, contexts = [1, 2, 8, 32, 128, 512], [1, 2, 5, 9], [0, 128, 4096]
    for batch, t, ctx in itertools.product(batches, tokens, contexts):
        here = cost.forward_seconds(target, batch, t, ctx * batch)
        assert cost.forward_seconds(target, batch * 2, t, ctx * batch * 2) >= here
        assert cost.forward_seconds(target, batch, t + 1, ctx * batch) >= here
        assert cost.forward_seconds(target, batch, t, (ctx + 64) * batch) >= here
    for batch, k in itertools.product(batches, range(8)):
        assert (
            cost.step(batch, k + 1, 512 * batch).step_seconds > cost.step(batch, k, 512 * batch).step_seconds
        )


def test_small_batch_is_bandwidth_bound_and_large_batch_compute_bound() -> None:
    hw = specs.hardware("h100-sxm")
    cost = StepCostModel(hw, specs.model("llama-3.1-8b"), None)
    fixed = (hw.forward_overhead_us) * 1e-6
    one = cost.forward_seconds(cost.target, 1, 1, 0) - fixed
    weights_time = cost.target.weight_bytes / (hw.mem_bandwidth_gbps * 1e9 * hw.bandwidth_efficiency)
    assert one == pytest.approx(weights_time, rel=1e-3)
    # Verifying 5 tokens at batch 1 costs about the same as 1 (memory-bound) ...
    assert cost.forward_seconds(cost.target, 1, 5, 0) < 1.01 * cost.forward_seconds(cost.target, 1, 1, 0)
    # ... but at batch 512 it is compute-bound and costs about 5x.
    big = cost.forward_seconds(cost.target, 512, 5, 0) / cost.forward_seconds(cost.target, 512, 1, 0)
    assert 4.0 < big <= 5.0


def test_tensor_parallel_splits_weights_and_adds_communication() -> None:
    target = specs.model("llama-3.1-70b")
    one = StepCostModel(specs.HardwareSpec("one", 3350, 989), target, None)
    four = StepCostModel(specs.HardwareSpec("four", 3350, 989, num_gpus=4), target, None)
    assert four.forward_seconds(target, 1, 1, 0) < one.forward_seconds(target, 1, 1, 0) / 3
    comm = 2 * target.layers * four.hardware.allreduce_us * 1e-6
    assert four.forward_seconds(target, 1, 1, 0) > comm
