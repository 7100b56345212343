from __future__ import annotations

import pytest

from adaptivespec.sim import specs
from adaptivespec.sim.calibration import (
    TT_A100_8B_1B,
    calibrate,
    expected_tokens,
    goodput,
    token_acceptance,
)
from adaptivespec.sim.costmodel import StepCostModel


def test_token_acceptance_inverts_the_reported_rate() -> None:
    alpha = token_acceptance(0.617, 3)
    assert sum(alpha**j for j in range(1, 4)) == pytest.approx(0.617 * 3, rel=1e-9)
    assert expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)


def test_preset_defaults_reproduce_the_fitted_publication() -> None:
    a100, target, draft = (
        specs.hardware("a100-80gb"),
        specs.model("llama-3.1-8b"),
        specs.model("llama-3.2-1b"),
    )
    fit = calibrate(a100, target, draft, TT_A100_8B_1B)
    assert a100.step_overhead_us == pytest.approx(fit.step_overhead_us, abs=10)
    assert a100.forward_overhead_us == pytest.approx(fit.forward_overhead_us, abs=5)
    assert a100.efficiency == pytest.approx(fit.efficiency, abs=0.005)
    cost = StepCostModel(a100, target, draft)
    ctx, k = TT_A100_8B_1B.mean_context, TT_A100_8B_1B.k
    assert 1000 / goodput(cost, 1, 0, fit.alpha, ctx) == pytest.approx(16.5, abs=0.05)
    assert 1000 / goodput(cost, 1, k, fit.alpha, ctx) == pytest.approx(7.96, abs=0.05)
    assert goodput(cost, 32, k, fit.alpha, ctx) > goodput(cost, 32, 0, fit.alpha, ctx)
    assert goodput(cost, 64, k, fit.alpha, ctx) < goodput(cost, 64, 0, fit.alpha, ctx)
