"""The coupled sampler: each token is an exact sample of the target's distribution, a draft
is kept exactly when it equals the target's own choice, and the noise depends on nothing but
(seed, position)."""

from __future__ import annotations

import numpy as np
import torch

from adaptivespec.engine.sampling import BatchSampling, choices, noise_key
from adaptivespec.engine.verification import kept_prefix, verify

# Chi-square critical value for 4 degrees of freedom at significance 1e-6: a correct sampler
# fails this bound about once in a million seeds; a biased one (off by 0.02) fails it always.
CHI2_DF4_1E6 = 33.38
TRIALS = 50_000  # a 2-point bias then gives a non-centrality of about 130: power ~1


def _chi_square(samples: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(samples, minlength=probs.numel()).double()
    expected = probs.double() * samples.numel()
    kept = expected > 0
    assert counts[~kept].sum() == 0, "a token outside the distribution's support was drawn"
    return float(((counts[kept] - expected[kept]) ** 2 / expected[kept]).sum())


def _sampling(
    seeds: list[int], positions: list[int], temperature: float = 1.0, top_p: float = 1.0
) -> BatchSampling:
    n = len(seeds)
    return BatchSampling(
        torch.full((n,), temperature),
        torch.full((n,), top_p),
        torch.zeros(n, dtype=torch.bool),
        seeds,
        np.array(positions, dtype=np.int64),
        np.zeros(n, dtype=bool),
        all_greedy=False,
        any_top_p=top_p < 1.0,
    )


P0 = torch.tensor([0.40, 0.25, 0.20, 0.10, 0.05])


def _draw(probs: torch.Tensor, seeds: range, position: int = 7, top_p: float = 1.0) -> torch.Tensor:
    logits = probs.log().expand(len(seeds), 1, -1)
    return choices(logits, _sampling(list(seeds), [position] * len(seeds), top_p=top_p))[:, 0]


def test_each_token_is_an_exact_sample_of_the_distribution() -> None:
    drawn = _draw(P0, range(TRIALS))
    assert _chi_square(drawn, P0) < CHI2_DF4_1E6
    later = _draw(P0, range(TRIALS), position=8)  # another position: other noise, same law
    assert _chi_square(later, P0) < CHI2_DF4_1E6
    assert (drawn != later).float().mean() > 0.4


def test_top_p_keeps_the_renormalised_nucleus() -> None:
    drawn = _draw(P0, range(TRIALS), top_p=0.7)  # keeps 0.40, 0.25 and 0.20 (mass before < 0.7)
    nucleus = torch.tensor([0.40, 0.25, 0.20, 0.0, 0.0]) / 0.85
    assert _chi_square(drawn, nucleus) < CHI2_DF4_1E6


def test_the_test_detects_a_biased_sampler() -> None:
    """Guards the bound itself (its power): a sampler off by two points must fail it."""
    biased = P0 + torch.tensor([0.02, -0.02, 0.0, 0.0, 0.0])
    assert _chi_square(_draw(biased, range(TRIALS)), P0) > CHI2_DF4_1E6


def test_a_deterministic_draft_is_kept_with_its_target_probability() -> None:
    """Prompt lookup's drafts are fixed tokens: coupling keeps one with probability p(d),
    exactly what rejection sampling does, and the kept tokens follow the target."""
    seeds = list(range(TRIALS))
    p1 = torch.tensor([0.05, 0.15, 0.30, 0.30, 0.20])
    logits = torch.stack([P0, p1]).log().expand(TRIALS, -1, -1)  # [N, K+1, V]
    drafts = torch.full((TRIALS, 1), 1)
    chosen, kept = verify(logits, drafts, np.ones(TRIALS, dtype=np.int64), _sampling(seeds, [3] * TRIALS))
    assert abs(kept.mean() - P0[1].item()) < 0.008  # 4 standard errors at 50,000 trials
    assert _chi_square(torch.from_numpy(chosen[:, 0]), P0) < CHI2_DF4_1E6
    assert _chi_square(torch.from_numpy(chosen[kept == 1, 1]), p1) < CHI2_DF4_1E6


def test_noise_depends_on_seed_and_position_alone() -> None:
    logits = torch.randn(3, 4, 50, generator=torch.Generator().manual_seed(0))
    alone = choices(logits[1:2], _sampling([11], [20]))
    batch = choices(logits, _sampling([5, 11, 99], [3, 20, 7]))
    assert batch[1].tolist() == alone[0].tolist()
    shifted = choices(logits[1:2, 1:], _sampling([11], [21]))  # the same positions, entered later
    assert shifted[0].tolist() == alone[0, 1:].tolist()
    keys = {noise_key(seed, position) for seed in range(64) for position in range(64)}
    assert len(keys) == 64 * 64


def test_the_kept_prefix_stops_at_the_first_difference_or_the_draft_count() -> None:
    chosen = np.array([[3, 1, 4, 5], [3, 1, 4, 5], [7, 1, 4, 5]])
    drafts = np.array([[3, 1, 2], [3, 1, 4], [3, 1, 4]])
    assert kept_prefix(chosen, drafts, np.array([3, 2, 3])).tolist() == [2, 2, 0]


def _reduced_head_drafts(draft_probs: torch.Tensor, ids: list[int], sampling: BatchSampling) -> torch.Tensor:
    """Drafts of an EAGLE-3 head whose vocabulary is the target ids `ids`: its distribution
    mapped through d2t into the target's vocabulary, sampled under the target's noise."""
    from adaptivespec.engine.eagle3_format import Eagle3Spec
    from adaptivespec.engine.eagle3_head import Eagle3Head

    layer = {"model_type": "llama", "hidden_size": 8, "intermediate_size": 8, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 4, "num_hidden_layers": 1,
             "vocab_size": P0.numel()}  # fmt: skip
    head = Eagle3Head(Eagle3Spec(layer, len(ids), (0, 1, 2)))
    head.d2t.copy_(torch.tensor(ids) - torch.arange(len(ids)))
    logits = head.target_logits(draft_probs.log().expand(TRIALS, 1, -1), P0.numel())  # [N, 1, V]
    return choices(logits, sampling)


def test_drafts_through_a_reduced_vocabulary_keep_the_target_nucleus() -> None:
    """Top-p 0.7 (keeps ids 0-2 of P0): a head drafting among target ids {0, 2, 3} only, with
    its own distribution, leaves every token an exact sample of the renormalised nucleus."""
    sampling = _sampling(list(range(TRIALS)), [5] * TRIALS, top_p=0.7)
    drafts = _reduced_head_drafts(torch.tensor([0.2, 0.5, 0.3]), [0, 2, 3], sampling)
    assert set(drafts[:, 0].tolist()) <= {0, 2, 3}  # never an id outside its vocabulary
    logits = P0.log().expand(TRIALS, 2, -1)
    chosen, kept = verify(logits, drafts, np.ones(TRIALS, dtype=np.int64), sampling)
    nucleus = torch.tensor([0.40, 0.25, 0.20, 0.0, 0.0]) / 0.85
    assert _chi_square(torch.from_numpy(chosen[:, 0]), nucleus) < CHI2_DF4_1E6
    assert 0.1 < kept.mean() < 0.9  # the test sees both kept and rejected drafts
    # Its power at top-p: the same bound fails a nucleus two points off.
    biased = nucleus + torch.tensor([0.02, -0.02, 0.0, 0.0, 0.0])
    assert _chi_square(torch.from_numpy(chosen[:, 0]), biased) > CHI2_DF4_1E6
