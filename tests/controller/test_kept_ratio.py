"""A cell's own rows against its drafter's pooled curve: the ratio moves only for rows unlike the pool's."""

from __future__ import annotations

import statistics

import numpy as np

from adaptivespec.controller.arms import OFF, arm
from adaptivespec.controller.kept_ratio import CellTokens, KeptRatio

ROWS, K, ALPHA = 4, 4, 0.6
EXPECTED = sum(ALPHA**j for j in range(1, K + 1))  # drafts a row keeps at ALPHA, per step
SEEDS = 200


def _ratio(alpha: float, steps: int, seed: int) -> float:
    """A cell whose rows keep each draft with `alpha`, priced by a curve that expects ALPHA."""
    rng = np.random.default_rng(seed)
    ratio = KeptRatio()
    for _ in range(steps):
        ratio.fade()
        kept = np.cumprod(rng.random((ROWS, K)) < alpha, axis=1).sum()
        ratio.observe(K, ROWS, int(kept))
    return ratio.ratio(lambda k: EXPECTED)


def test_rows_like_the_pools_leave_the_curve_nearly_as_it_is() -> None:
    """Rows drawn as the curve expects: the ratio is 1 unless the steps' sum outgrows their
    scatter, and then shrunk. Over 200 seeds of 20 steps (80 rows) its mean distance from 1 was
    0.017 and its 95th percentile 0.145; the plain ratio of kept to expected drafts, 0.107 and
    0.25, fails both bars."""
    distances = sorted(abs(_ratio(ALPHA, 20, seed) - 1) for seed in range(SEEDS))
    assert statistics.mean(distances) <= 0.04
    assert distances[int(0.95 * SEEDS)] <= 0.2


def test_rows_that_keep_less_move_the_ratio_most_of_the_way() -> None:
    """Rows keeping each draft at 0.4 keep 0.50x the drafts the curve expects: within 20 steps
    the ratio's median was 0.58 and its 95th percentile 0.74 (the power the shrinking leaves),
    and over 40 steps every seed's ratio was below 0.71."""
    truth = sum(0.4**j for j in range(1, K + 1)) / EXPECTED
    ratios = sorted(_ratio(0.4, 20, seed) for seed in range(SEEDS))
    assert abs(statistics.median(ratios) - truth) < 0.1
    assert ratios[int(0.95 * SEEDS)] < 0.8
    assert max(_ratio(0.4, 40, seed) for seed in range(SEEDS)) < 0.75


class _Curve:
    def __call__(self, a: object) -> float:
        return 1.0 + 2.0 * getattr(a, "k", 0) / 4

    def hoped(self, a: object) -> float:
        return 1.0 + 3.0 * getattr(a, "k", 0) / 4


def test_cell_tokens_scale_one_drafters_kept_drafts_and_keep_within_k() -> None:
    ratio = KeptRatio()
    for _ in range(10):
        ratio.observe(4, 4, 4)  # half the drafts the curve expects, every step alike
    scale = ratio.ratio(lambda k: 2.0 * k / 4)
    assert 0.5 < scale < 0.65  # a deviation every step alike: shrunk by a fifth (twice 10 steps' squares)
    tokens = CellTokens(_Curve(), {"ngram": ratio})
    assert tokens(OFF) == 1.0
    assert abs(tokens(arm("ngram", 4)) - (1 + scale * 2.0)) < 1e-9  # the curve's 2 kept drafts, scaled
    assert abs(tokens.hoped(arm("ngram", 4)) - (1 + scale * 3.0)) < 1e-9  # the curve's hope, scaled alike
    assert tokens(arm("suffix", 4)) == 3.0  # another drafter: its pooled curve
    generous = KeptRatio()
    for _ in range(10):
        generous.observe(1, 4, 16)
    assert CellTokens(_Curve(), {"ngram": generous})(arm("ngram", 1)) == 2.0  # at most K + 1


def test_a_cell_that_stops_drafting_drifts_back_to_the_pool() -> None:
    """Steps that ran no drafter still fade its rows: a verdict from rows long gone does not
    outlive them (a cell at speculation off learns nothing new of its drafters)."""
    ratio = KeptRatio()
    for _ in range(20):
        ratio.fade()
        ratio.observe(4, 4, 4)  # half of the 8 drafts expected
    assert ratio.ratio(lambda k: 2.0) < 0.6
    for _ in range(300):
        ratio.fade()
    assert ratio.ratio(lambda k: 2.0) > 0.9
