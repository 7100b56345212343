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
        """start, count: [n] host integers. A row whose count is 0 is all padding: it writes
        nothing real, and its outputs mean nothing (a catch-up pass, whose outputs are not read).

        The per-token indices are worked out on the host, from values it already holds, and
        copied to the device (on cpu the tensors wrap the arrays). The mask, which grows with
        the context, is built on the device, or on cpu by numpy, whose few operations cost
        less than torch's dispatch does right after a forward (docs/decisions.md, cold caches
        after a forward).
        """
        width, read_len = int(count.max()), int((start + count).max())
        if (count == width).all():  # a decode step: no pads, and no per-token choices to make
            real_cols = start[:, None] + np.arange(width)
            cols, positions = real_cols.copy(), real_cols.copy()
        else:
            real_index = np.arange(width) - (width - count)[:, None]  # [n, T], negative for pads
            is_real = real_index >= 0
            real_cols = start[:, None] + np.maximum(real_index, 0)
            cols = np.where(is_real, real_cols, cache_len - 1)
            # A pad sits at position 0 and so sees column 0 alone; a real token sees up to itself.
            positions = np.where(is_real, real_cols, 0)
        # Separate tensors, not views of one: a compiled step guards on each input's storage offset.
        cols_t, positions_t, gather_t = (upload(a, device) for a in (cols, positions, real_cols))
        if device.type == "cpu":
            sees = torch.from_numpy(np.arange(read_len) <= positions[:, :, None])  # [n, T, read_len]
        else:
            sees = torch.arange(read_len, device=device).view(1, 1, read_len) <= positions_t.unsqueeze(2)
        return cls(cols_t, positions_t, sees.unsqueeze(1), gather_t, read_len)
