"""Layout of one ragged forward pass: which column each token writes and which it reads.

Rows are left-padded to a common length T so that every row's last real token sits at
index T-1 (so `logits_to_keep=1` works for any model). Row r writes `count[r]` real tokens
at columns [start[r], start[r] + count[r]). Pad tokens write to the cache's last column,
which no real token ever reads, and attend to column 0 only, so they stay finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from adaptivespec.engine.rows import upload


@dataclass(frozen=True, slots=True)
class RaggedLayout:
    cols: torch.Tensor  # [n, T] cache column each token writes
    positions: torch.Tensor  # [n, T] rotary position of each token
    mask: torch.Tensor  # [n, 1, T, read_len] bool, True = may attend
    gather_index: torch.Tensor  # [n, T] index into a row's token buffer (pads point at start)
    read_len: int

    @classmethod
    def build(
        cls, start: np.ndarray, count: np.ndarray, cache_len: int, device: torch.device
    ) -> RaggedLayout:
        """start, count: [n] host integers; every count must be >= 1.

        They come from the host so that the layout's shape is known without reading the device.
        """
        width, read_len = int(count.max()), int((start + count).max())
        start_t, count_t = upload(start, device), upload(count, device)
        pad = width - count_t  # [n]
        t = torch.arange(width, device=device).unsqueeze(0)  # [1, T]
        real_index = t - pad.unsqueeze(1)  # [n, T], negative for pads
        is_real = real_index >= 0
        real_cols = start_t.unsqueeze(1) + real_index.clamp(min=0)
        cols = torch.where(is_real, real_cols, torch.full_like(real_cols, cache_len - 1))
        positions = torch.where(is_real, real_cols, torch.zeros_like(real_cols))
        c = torch.arange(read_len, device=device).view(1, 1, read_len)
        sees = torch.where(is_real.unsqueeze(2), c <= real_cols.unsqueeze(2), c == 0)
        return cls(cols, positions, sees.unsqueeze(1), real_cols, read_len)
