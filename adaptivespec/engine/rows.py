"""Per-row state shared by the runner and the proposers: the batch lives in rows [0, B)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class RowState:
    """Token history of every slot. A row's last token has not been fed to the target yet."""

    tokens: torch.Tensor  # [max_batch, cache_len] long
    lens: torch.Tensor  # [max_batch] long, tokens known per row (prompt + generated)

    @classmethod
    def allocate(cls, max_batch: int, cache_len: int, device: torch.device) -> RowState:
        return cls(
            torch.zeros(max_batch, cache_len, dtype=torch.long, device=device),
            torch.zeros(max_batch, dtype=torch.long, device=device),
        )

    @property
    def cache_len(self) -> int:
        return int(self.tokens.shape[1])

    def append(self, batch: int, new_tokens: torch.Tensor, counts: torch.Tensor) -> None:
        """Appends new_tokens[r, :counts[r]] to rows [0, batch).

        The whole width is written: columns past a row's new length are never read, so
        writing them is cheaper than masking them.
        """
        width = new_tokens.shape[1]
        cols = self.lens[:batch].unsqueeze(1) + torch.arange(width, device=new_tokens.device)
        self.tokens[:batch].scatter_(1, cols.clamp(max=self.cache_len - 1), new_tokens)
        self.lens[:batch] += counts

    def move(self, srcs: torch.Tensor, dsts: torch.Tensor) -> None:
        self.tokens[dsts] = self.tokens[srcs]
        self.lens[dsts] = self.lens[srcs]
