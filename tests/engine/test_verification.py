"""Speculative rejection sampling must reproduce the target's distribution exactly."""

from __future__ import annotations

import torch

from adaptivespec.engine.verification import accept_greedy, accept_rejection, greedy_prefix

# Chi-square critical value for 4 degrees of freedom at significance 1e-6: a correct sampler
# fails this bound about once in a million seeds; a biased one (off by 0.01) fails it always.
CHI2_DF4_1E6 = 33.38
TRIALS = 200_000


def _chi_square(samples: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(samples, minlength=probs.numel()).double()
    expected = probs.double() * samples.numel()
    return float(((counts - expected) ** 2 / expected).sum())


def _setup(seed: int) -> tuple[torch.Generator, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    p0 = torch.tensor([0.40, 0.25, 0.20, 0.10, 0.05])
    p1 = torch.tensor([0.05, 0.15, 0.30, 0.30, 0.20])
    q = torch.tensor([0.10, 0.50, 0.10, 0.20, 0.10])
    return generator, p0, p1, q


def test_first_token_follows_target_with_model_draft() -> None:
    generator, p0, p1, q = _setup(1)
    drafts = torch.multinomial(q.expand(TRIALS, -1), 2, replacement=True, generator=generator)  # [N, 2]
    target = torch.stack([p0, p1, p1]).expand(TRIALS, -1, -1)  # [N, K+1, V]
    draft_probs = q.expand(TRIALS, 2, -1)
    uniforms = torch.rand(TRIALS, 3, generator=generator)
    verdict = accept_rejection(target, draft_probs, drafts, torch.full((TRIALS,), 2), uniforms)
    assert _chi_square(verdict.tokens[:, 0], p0) < CHI2_DF4_1E6
    second = verdict.tokens[verdict.accepted >= 1, 1]
    assert second.numel() > TRIALS // 4
    assert _chi_square(second, p1) < CHI2_DF4_1E6


def test_first_token_follows_target_with_deterministic_draft() -> None:
    """The n-gram proposer's q is one-hot: accept with p(d), else sample p without d."""
    generator, p0, p1, _ = _setup(2)
    drafts = torch.full((TRIALS, 1), 1)
    target = torch.stack([p0, p1]).expand(TRIALS, -1, -1)
    uniforms = torch.rand(TRIALS, 2, generator=generator)
    verdict = accept_rejection(target, None, drafts, torch.ones(TRIALS, dtype=torch.long), uniforms)
    assert _chi_square(verdict.tokens[:, 0], p0) < CHI2_DF4_1E6
    acceptance = verdict.accepted.double().mean().item()
    assert abs(acceptance - p0[1].item()) < 0.005


def test_rejection_test_detects_a_biased_sampler() -> None:
    """Guards the bound itself: a sampler off by a few percent must fail it."""
    generator, p0, _, _ = _setup(3)
    biased = (p0 + torch.tensor([0.02, -0.02, 0.0, 0.0, 0.0])).expand(TRIALS, -1)
    samples = torch.multinomial(biased, 1, generator=generator).squeeze(1)
    assert _chi_square(samples, p0) > CHI2_DF4_1E6


def test_greedy_accepts_the_matching_prefix_plus_one_bonus() -> None:
    logits = torch.full((2, 4, 6), -1.0)
    for pos, tok in enumerate([3, 1, 4, 5]):
        logits[0, pos, tok] = 1.0
        logits[1, pos, tok] = 1.0
    drafts = torch.tensor([[3, 1, 2], [3, 1, 4]])
    verdict = accept_greedy(logits, drafts, torch.tensor([3, 2]))
    assert verdict.accepted.tolist() == [2, 2]
    assert verdict.tokens[0, :3].tolist() == [3, 1, 4]  # 2 accepted, then the target's correction
    assert verdict.tokens[1, :3].tolist() == [3, 1, 4]  # capped at n_drafts=2, then the bonus token


def test_the_host_prefix_count_is_the_device_one() -> None:
    """Greedy steps count the kept drafts on the host (`greedy_prefix`); every row of a random
    batch, with drafts that match for a while and counts below K, must agree with the device."""
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(64, 5, 6, generator=generator)  # [B, K+1, V]
    argmax = logits.argmax(dim=-1)
    drafts = argmax[:, :4].clone()
    wrong_from = torch.randint(0, 5, (64,), generator=generator)  # 4: every draft matches
    for row, column in enumerate(wrong_from.tolist()):
        drafts[row, column:] = (drafts[row, column:] + 1) % 6
    n_drafts = torch.randint(0, 5, (64,), generator=generator)
    device = accept_greedy(logits, drafts, n_drafts)
    host = greedy_prefix(argmax.numpy(), drafts.numpy(), n_drafts.numpy())
    assert host.tolist() == device.accepted.tolist()
    assert len(set(host.tolist())) == 5  # every count from 0 to 4 occurs
    for row, kept in enumerate(host.tolist()):  # what the step emits: the argmax prefix
        assert argmax[row, : kept + 1].tolist() == device.tokens[row, : kept + 1].tolist()
