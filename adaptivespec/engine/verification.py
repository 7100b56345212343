"""Verification of drafted tokens: greedy prefix matching and speculative rejection sampling.

Rejection sampling (Leviathan et al. 2023, Chen et al. 2023) accepts draft token d with
probability min(1, p(d)/q(d)) and, at the first rejection, samples from norm(max(p - q, 0)),
so every emitted token is distributed exactly as the target alone would sample it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from adaptivespec.engine.sampling import BatchSampling, probabilities, sample_from


@dataclass(frozen=True, slots=True)
class Verdict:
    accepted: torch.Tensor  # [B] long, number of drafts kept per row
    tokens: torch.Tensor  # [B, K+1] long; row r emits tokens[r, : accepted[r] + 1]


def _first_false(ok: torch.Tensor) -> torch.Tensor:
    """ok [B, K] bool -> length of the all-True prefix of each row."""
    return ok.long().cumprod(dim=1).sum(dim=1)


def accept_greedy(target_logits: torch.Tensor, drafts: torch.Tensor, n_drafts: torch.Tensor) -> Verdict:
    """target_logits [B, K+1, V], drafts [B, K], n_drafts [B]: longest prefix equal to the argmax."""
    argmax = target_logits.argmax(dim=-1)  # [B, K+1]
    k = drafts.shape[1]
    ok = (argmax[:, :k] == drafts) & (torch.arange(k, device=drafts.device) < n_drafts.unsqueeze(1))
    accepted = _first_false(ok)
    tokens = torch.cat([drafts, drafts[:, :1]], dim=1)  # placeholder column for the bonus token
    bonus = argmax.gather(1, accepted.unsqueeze(1))
    tokens = tokens.scatter(1, accepted.unsqueeze(1), bonus)
    return Verdict(accepted, tokens)


def greedy_prefix(argmax: np.ndarray, drafts: np.ndarray, n_drafts: np.ndarray) -> np.ndarray:
    """`accept_greedy`'s count on host arrays (argmax [B, K+1], drafts [B, K], n_drafts [B]),
    for a step that has read them back anyway: the kept tokens are argmax[r, : count + 1]."""
    k = drafts.shape[1]
    ok = (argmax[:, :k] == drafts) & (np.arange(k) < n_drafts[:, None])
    return np.cumprod(ok, axis=1).sum(axis=1)


def accept_rejection(
    target_probs: torch.Tensor,  # [B, K+1, V]
    draft_probs: torch.Tensor | None,  # [B, K, V]; None means the drafts were deterministic (q = one-hot)
    drafts: torch.Tensor,  # [B, K]
    n_drafts: torch.Tensor,  # [B]
    uniforms: torch.Tensor,  # [B, K+1]: K accept tests, then one draw for the corrected/bonus token
) -> Verdict:
    k = drafts.shape[1]
    p_draft = target_probs[:, :k].gather(2, drafts.unsqueeze(2)).squeeze(2)  # [B, K]
    q_draft = (
        torch.ones_like(p_draft)
        if draft_probs is None
        else draft_probs.gather(2, drafts.unsqueeze(2)).squeeze(2)
    )
    ok = uniforms[:, :k] * q_draft < p_draft
    ok &= torch.arange(k, device=drafts.device) < n_drafts.unsqueeze(1)
    accepted = _first_false(ok)

    at = accepted.view(-1, 1, 1).expand(-1, 1, target_probs.shape[2])
    p_at = target_probs.gather(1, at).squeeze(1)  # [B, V]
    residual = _residual(p_at, draft_probs, drafts, accepted, k)
    rejected = (accepted < n_drafts).unsqueeze(1)
    final_probs = torch.where(rejected, residual, p_at)
    last = sample_from(final_probs, uniforms[:, k])
    tokens = torch.cat([drafts, drafts[:, :1]], dim=1).scatter(1, accepted.unsqueeze(1), last.unsqueeze(1))
    return Verdict(accepted, tokens)


def _residual(
    p_at: torch.Tensor, draft_probs: torch.Tensor | None, drafts: torch.Tensor, accepted: torch.Tensor, k: int
) -> torch.Tensor:
    """norm(max(p - q, 0)) at each row's first rejected position."""
    index = accepted.clamp(max=k - 1)
    if draft_probs is None:
        rejected_token = drafts.gather(1, index.unsqueeze(1))
        residual = p_at.scatter(1, rejected_token, 0.0)
    else:
        at = index.view(-1, 1, 1).expand(-1, 1, draft_probs.shape[2])
        residual = (p_at - draft_probs.gather(1, at).squeeze(1)).clamp(min=0.0)
    mass = residual.sum(dim=1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp(min=1e-30), p_at)


def verify(
    target_logits: torch.Tensor,  # [B, K+1, V]
    draft_probs: torch.Tensor | None,  # [B, K, V] or None
    drafts: torch.Tensor,  # [B, K]
    n_drafts: torch.Tensor,  # [B]
    sampling: BatchSampling,
) -> Verdict:
    """Greedy rows keep the argmax prefix; sampled rows go through rejection sampling."""
    greedy = accept_greedy(target_logits, drafts, n_drafts)
    if sampling.all_greedy:
        return greedy
    probs = probabilities(target_logits, sampling)
    uniforms = sampling.uniforms(drafts.shape[1] + 1, target_logits.device)
    sampled = accept_rejection(probs, draft_probs, drafts, n_drafts, uniforms)
    is_greedy = sampling.greedy.to(drafts.device)
    return Verdict(
        torch.where(is_greedy, greedy.accepted, sampled.accepted),
        torch.where(is_greedy.unsqueeze(1), greedy.tokens, sampled.tokens),
    )
