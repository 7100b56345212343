"""Proposers draft K tokens per row for the target to verify in one pass.

Both sit behind `Proposer`. The draft-model proposer keeps its own slot KV cache, which may
lag behind the target (after K = 0 steps, or after a bonus token); its first forward of a
step catches every row up in one batched ragged pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedModel

from adaptivespec.engine.cached_model import CachedModel, ForwardClock
from adaptivespec.engine.ragged import RaggedLayout
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.sampling import BatchSampling, probabilities, sample_from


@dataclass(frozen=True, slots=True)
class Proposal:
    drafts: torch.Tensor  # [B, K] long
    n_drafts: torch.Tensor  # [B] long, drafts actually proposed per row (<= K)
    probs: torch.Tensor | None  # [B, K, V] draft distribution q; None when deterministic (q one-hot)


class Proposer(Protocol):
    name: str

    @property
    def nbytes(self) -> int: ...

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> None: ...

    def propose(self, rows: RowState, batch: int, k: int, sampling: BatchSampling) -> Proposal: ...

    def commit(self, batch: int, old_lens: torch.Tensor, accepted: torch.Tensor) -> None: ...

    def move_rows(self, srcs: torch.Tensor, dsts: torch.Tensor, upto: int) -> None: ...


class DraftModelProposer:
    """Drafts with a small causal LM that shares the target's tokenizer.

    The two models' logit widths may differ (padded embedding tables): drafts are drawn
    only among the ids both have, and q is zero-padded to the target's width.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        name: str,
        max_batch: int,
        cache_len: int,
        clock: ForwardClock,
        *,
        target_width: int | None = None,
    ) -> None:
        self.name = name
        self.draft = CachedModel(model, max_batch, cache_len, clock)
        own_width = int(model.get_output_embeddings().weight.shape[0])
        self.target_width = target_width or own_width
        self.shared_width = min(own_width, self.target_width)
        self.cached = torch.zeros(max_batch, dtype=torch.long, device=self.draft.device)  # [max_batch]

    @property
    def nbytes(self) -> int:
        return self.draft.cache.nbytes

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> None:
        self.draft.prefill(row_start, chunks, starts)
        ends = [start + len(chunk) for chunk, start in zip(chunks, starts, strict=True)]
        self.cached[row_start : row_start + len(chunks)] = torch.tensor(ends, device=self.cached.device)

    def propose(self, rows: RowState, batch: int, k: int, sampling: BatchSampling) -> Proposal:
        lens = rows.lens[:batch]
        catch_up = RaggedLayout.build(self.cached[:batch], lens - self.cached[:batch], self.draft.cache_len)
        ids = rows.tokens[:batch].gather(1, catch_up.gather_index)
        logits = self._forward(ids, catch_up)
        drafts: list[torch.Tensor] = []
        probs: list[torch.Tensor] = []
        one = torch.ones_like(lens)
        for j in range(k):
            token, q = self._pick(logits, sampling)
            drafts.append(token)
            if q is not None:
                probs.append(q)
            if j + 1 < k:
                logits = self._forward(
                    token.unsqueeze(1), RaggedLayout.build(lens + j, one, self.draft.cache_len)
                )
        self.cached[:batch] = lens + (k - 1)
        stacked = torch.stack(probs, dim=1) if probs else None
        return Proposal(torch.stack(drafts, dim=1), torch.full_like(lens, k), stacked)

    def commit(self, batch: int, old_lens: torch.Tensor, accepted: torch.Tensor) -> None:
        self.cached[:batch] = torch.minimum(self.cached[:batch], old_lens + accepted)

    def move_rows(self, srcs: torch.Tensor, dsts: torch.Tensor, upto: int) -> None:
        self.draft.cache.move_rows(srcs, dsts, upto)
        self.cached[dsts] = self.cached[srcs]

    def _forward(self, ids: torch.Tensor, layout: RaggedLayout) -> torch.Tensor:
        return self.draft.forward(0, ids, layout, last_only=True)[:, -1, : self.shared_width]  # [B, V]

    def _pick(
        self, logits: torch.Tensor, sampling: BatchSampling
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        argmax = logits.argmax(dim=-1)
        if sampling.all_greedy:
            return argmax, None
        q = probabilities(logits.unsqueeze(1), sampling).squeeze(1)
        sampled = sample_from(q, sampling.uniforms(1, logits.device).squeeze(1))
        q = torch.nn.functional.pad(q, (0, self.target_width - self.shared_width))  # [B, V_target]
        return torch.where(sampling.greedy.to(logits.device), argmax, sampled), q


class NgramProposer:
    """Prompt lookup: copies what followed the most recent earlier match of the last n tokens."""

    def __init__(self, max_n: int = 3, min_n: int = 2) -> None:
        self.name = f"ngram{min_n}-{max_n}"
        self.max_n = max_n
        self.min_n = min_n

    @property
    def nbytes(self) -> int:
        return 0

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> None:
        return None

    def propose(self, rows: RowState, batch: int, k: int, sampling: BatchSampling) -> Proposal:
        lens = rows.lens[:batch]
        tokens = rows.tokens[:batch, : int(lens.max())]
        follow = torch.full_like(lens, -1)  # [B] index of the first copied token, -1 = no match
        for n in range(self.max_n, self.min_n - 1, -1):
            found = self._last_match(tokens, lens, n)
            follow = torch.where((follow < 0) & (found >= 0), found + n, follow)
        offsets = torch.arange(k, device=lens.device)
        index = (follow.clamp(min=0).unsqueeze(1) + offsets).clamp(max=tokens.shape[1] - 1)
        drafts = tokens.gather(1, index)
        n_drafts = torch.where(follow >= 0, (lens - follow).clamp(max=k), torch.zeros_like(lens))
        return Proposal(drafts, n_drafts, None)

    @staticmethod
    def _last_match(tokens: torch.Tensor, lens: torch.Tensor, n: int) -> torch.Tensor:
        """Start of the latest earlier occurrence of each row's last n tokens, or -1."""
        width = tokens.shape[1] - n
        if width <= 0:
            return torch.full_like(lens, -1)
        suffix_index = (lens - n).clamp(min=0).unsqueeze(1) + torch.arange(n, device=lens.device)
        suffix = tokens.gather(1, suffix_index)  # [B, n]
        match = torch.arange(width, device=lens.device) < (lens - n).unsqueeze(1)  # strictly earlier
        for i in range(n):
            match &= tokens[:, i : i + width] == suffix[:, i : i + 1]
        last = width - 1 - match.flip(1).long().argmax(dim=1)
        return torch.where(match.any(dim=1), last, torch.full_like(lens, -1))

    def commit(self, batch: int, old_lens: torch.Tensor, accepted: torch.Tensor) -> None:
        return None

    def move_rows(self, srcs: torch.Tensor, dsts: torch.Tensor, upto: int) -> None:
        return None
