"""Verification of drafted tokens: every row keeps the longest prefix of its drafts that equals
the target's own choice at each position, then the target's choice after it.

The target's choice is the argmax for greedy rows and, for sampled rows, the Gumbel-max under
noise drawn from (seed, position) alone (sampling.py): the same token the target would take at
K = 0. So the output is the K = 0 output token for token, at any K and beside any batch, and
every emitted token is an exact sample of the target's distribution.

Against standard rejection sampling (Leviathan et al. 2023), which keeps a draft d with
probability min(1, p(d)/q(d)), this coupling keeps a deterministic draft (prompt lookup) with
the same probability p(d), and a sampled draft somewhat less often: at least (1 - TV)/(1 + TV)
against 1 - TV (docs/results.md has the measured cost, and docs/decisions.md the choice).
"""

from __future__ import annotations

import numpy as np
import torch

from adaptivespec.engine.sampling import BatchSampling, choices


def kept_prefix(chosen: np.ndarray, drafts: np.ndarray, n_drafts: np.ndarray) -> np.ndarray:
    """How many drafts each row keeps: the longest prefix equal to the target's choices
    (chosen [B, K+1], drafts [B, K], n_drafts [B], host arrays); row r then emits
    chosen[r, : kept[r] + 1]."""
    k = drafts.shape[1]
    ok = (chosen[:, :k] == drafts) & (np.arange(k) < n_drafts[:, None])
    return np.cumprod(ok, axis=1).sum(axis=1)


def verify(
    target_logits: torch.Tensor,  # [B, K+1, V]
    drafts: torch.Tensor,  # [B, K] long, on the device
    n_drafts: np.ndarray,  # [B] int64, on the host
    sampling: BatchSampling,  # positions: each row's first verified position
) -> tuple[np.ndarray, np.ndarray]:
    """The target's choices [B, K+1] and the drafts kept per row [B], as host arrays: the
    step's one read of the device."""
    chosen = choices(target_logits, sampling)  # [B, K+1]
    if chosen.device.type == "cpu":  # both are host memory already: nothing to gather
        host_chosen, host_drafts = chosen.numpy(), drafts.numpy()
    else:
        width = chosen.shape[1]
        read = torch.cat([chosen, drafts], dim=1).cpu().numpy()
        host_chosen, host_drafts = read[:, :width], read[:, width:]
    return host_chosen, kept_prefix(host_chosen, host_drafts, n_drafts)
