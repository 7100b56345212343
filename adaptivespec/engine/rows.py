"""Per-row state shared by the runner and the proposers: the batch lives in rows [0, B).

The state lives on the device, and the host keeps its own copy of the lengths and tokens,
built only from values it already holds: the prompts it sent and the tokens each step
reads back once. So no step reads the device to learn a length (each such read is a host
synchronisation on a GPU). On cpu the host arrays are the tensors' own memory, and every
update is one numpy operation on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


def upload(values: Sequence[int] | np.ndarray, device: torch.device) -> torch.Tensor:
    """Host integers -> a long tensor on `device`, without waiting for the device."""
    host = torch.as_tensor(np.asarray(values, dtype=np.int64))
    return host.to(device, non_blocking=True)


@dataclass(frozen=True, slots=True)
class RowState:
    """Token history of every slot. A row's last token has not been fed to the target yet."""

    tokens: torch.Tensor  # [max_batch, cache_len] long, on the device
    lens: torch.Tensor  # [max_batch] long, on the device: tokens known per row (prompt + generated)
    host_tokens: np.ndarray  # [max_batch, cache_len] int64, the host's copy of `tokens`
    host_lens: np.ndarray  # [max_batch] int64, the host's copy of `lens`

    @classmethod
    def allocate(cls, max_batch: int, cache_len: int, device: torch.device) -> RowState:
        host_tokens, host_lens = np.zeros((max_batch, cache_len), np.int64), np.zeros(max_batch, np.int64)
        if device.type == "cpu":
            return cls(torch.from_numpy(host_tokens), torch.from_numpy(host_lens), host_tokens, host_lens)
        tokens = torch.zeros(max_batch, cache_len, dtype=torch.long, device=device)
        return cls(tokens, torch.zeros(max_batch, dtype=torch.long, device=device), host_tokens, host_lens)

    @property
    def cache_len(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def shares_memory(self) -> bool:
        return self.tokens.device.type == "cpu"

    def write_prompt(self, row: int, prompt: list[int]) -> None:
        self.host_tokens[row, : len(prompt)] = prompt
        if not self.shares_memory:
            self.tokens[row, : len(prompt)] = upload(prompt, self.tokens.device)

    def set_lens(self, row_start: int, lens: list[int]) -> None:
        self.host_lens[row_start : row_start + len(lens)] = lens
        if not self.shares_memory:
            self.lens[row_start : row_start + len(lens)] = upload(lens, self.lens.device)

    def last_tokens(self, batch: int) -> torch.Tensor:
        return self.tokens[:batch].gather(1, (self.lens[:batch] - 1).unsqueeze(1))  # [B, 1]

    def append(self, row_start: int, new_tokens: np.ndarray, counts: np.ndarray) -> None:
        """Appends new_tokens[r, :counts[r]] ([n, W] and [n] int64, as the step read them back)
        to rows [row_start, row_start + n).

        The host copy is written, and on a device with memory of its own the same values are
        copied there. The whole width is written: columns past a row's new length are never
        read, so writing them is cheaper than masking them.
        """
        rows = slice(row_start, row_start + new_tokens.shape[0])
        cols = np.minimum(self.host_lens[rows, None] + np.arange(new_tokens.shape[1]), self.cache_len - 1)
        self.host_tokens[rows][np.arange(new_tokens.shape[0])[:, None], cols] = new_tokens
        self.host_lens[rows] += counts
        if not self.shares_memory:
            device = self.tokens.device
            self.tokens[rows].scatter_(1, upload(cols, device), upload(new_tokens, device))
            self.lens[rows] = upload(self.host_lens[rows].copy(), device)  # the host array changes next step

    def rewind(self, batch: int, count: int) -> None:
        """Forgets each row's last `count` tokens (benchmarks that hold the context fixed)."""
        self.host_lens[:batch] -= count
        if not self.shares_memory:
            self.lens[:batch] -= count

    def move(self, srcs: list[int], dsts: list[int]) -> None:
        self.host_tokens[dsts] = self.host_tokens[srcs]
        self.host_lens[dsts] = self.host_lens[srcs]
        if not self.shares_memory:
            src, dst = upload(srcs, self.tokens.device), upload(dsts, self.tokens.device)
            self.tokens[dst] = self.tokens[src]
            self.lens[dst] = self.lens[src]
