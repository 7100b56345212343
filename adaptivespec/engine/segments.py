"""A plain decode step and prompt chunks in one forward: the tokens of every row, flattened.

A prompt chunk run as a forward of its own reads every weight again, as a decode step does:
on a CPU a 16-token chunk of the default model costs half a batch-32 decode step, so the
streams' gaps grow by that half while a long prompt goes in. Flattened beside the decode
rows, the chunk shares the step's one pass over the weights and adds only its own tokens'
work; this is how vLLM and SGLang run chunked prefill. Only attention needs the rows apart:
the segments say which tokens belong to which row, and `attend` runs each group against its
own rows of the cache (the decode rows batched, each chunk alone).

Layout of the flattened sequence [1, T]: tokens [0, B) are the last tokens of decode rows
[0, B), one each; then each chunk's tokens, for rows B, B + 1, ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from adaptivespec.engine.rows import upload

# (query [n, H, T, d], key [n, H_kv, L, d], value, mask [n, 1, T, L]) -> [n, T, H, d_v]
GroupAttention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True, slots=True)
class Segments:
    decode_rows: int  # B
    decode_mask: torch.Tensor  # [B, 1, 1, L] bool, True = may attend; L: the longest decode row
    chunk_offsets: tuple[int, ...]  # where each chunk's tokens start in the flattened sequence
    chunk_masks: tuple[torch.Tensor, ...]  # [1, 1, c, start + c] bool, one per chunk

    @property
    def rows(self) -> int:
        return self.decode_rows + len(self.chunk_offsets)

    def attend(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, group: GroupAttention
    ) -> torch.Tensor:
        """query [1, H, T, d], key and value [rows, H_kv, read_len, d] -> [1, T, H, d_v].

        Each group reads only the columns its own rows hold (its mask's width): the decode rows
        must not pay for a long prompt's columns.
        """
        b = self.decode_rows
        outs = []
        if b:
            q = query[0, :, :b].transpose(0, 1).unsqueeze(2)  # [B, H, 1, d]
            width = self.decode_mask.shape[-1]
            out = group(q, key[:b, :, :width], value[:b, :, :width], self.decode_mask)  # [B, 1, H, d_v]
            outs.append(out.reshape(1, b, query.shape[1], -1))
        for i, (offset, mask) in enumerate(zip(self.chunk_offsets, self.chunk_masks, strict=True)):
            q = query[:, :, offset : offset + mask.shape[2]]  # [1, H, c, d]
            row, width = slice(b + i, b + i + 1), mask.shape[-1]
            outs.append(group(q, key[row, :, :width], value[row, :, :width], mask))
        return torch.cat(outs, dim=1)


@dataclass(frozen=True, slots=True)
class SegmentLayout:
    """Where each token of the flattened forward writes, reads and sits."""

    rows: torch.Tensor  # [1, T] cache row each token writes
    cols: torch.Tensor  # [1, T] cache column each token writes
    keep: torch.Tensor  # [B + chunks] the tokens whose logits are needed: each row's last
    segments: Segments
    read_len: int

    @property
    def positions(self) -> torch.Tensor:
        """[1, T] rotary position of each token: its column (the slot cache writes a token at
        the column equal to its position)."""
        return self.cols

    @classmethod
    def build(
        cls, decode_lens: np.ndarray, chunk_starts: np.ndarray, chunk_counts: np.ndarray, device: torch.device
    ) -> SegmentLayout:
        """decode_lens [B]: tokens known per decode row (its last one is fed now, at column len - 1);
        chunk_starts, chunk_counts [m]: each chunk writes columns [start, start + count) of row B + i."""
        b, m = len(decode_lens), len(chunk_starts)
        chunk_rows = b + np.repeat(np.arange(m), chunk_counts)
        chunk_cols = np.concatenate(
            [s + np.arange(c) for s, c in zip(chunk_starts, chunk_counts, strict=True)]
        )
        rows = np.concatenate([np.arange(b), chunk_rows])
        cols = np.concatenate([decode_lens - 1, chunk_cols])
        read_len = int(cols.max()) + 1
        offsets = b + np.concatenate([[0], np.cumsum(chunk_counts)[:-1]]).astype(np.int64)
        keep = np.concatenate([np.arange(b), offsets + chunk_counts - 1])
        column = torch.arange(read_len, device=device)
        width = int(decode_lens.max())
        decode_mask = (column[:width] <= upload(decode_lens - 1, device)[:, None]).view(b, 1, 1, width)
        chunk_masks = tuple(
            (column[: s + c] <= upload(s + np.arange(c), device)[:, None]).view(1, 1, int(c), int(s + c))
            for s, c in zip(chunk_starts, chunk_counts, strict=True)
        )
        segments = Segments(b, decode_mask, tuple(int(o) for o in offsets), chunk_masks)
        rows_t, cols_t = upload(rows, device).unsqueeze(0), upload(cols, device).unsqueeze(0)
        return cls(rows_t, cols_t, upload(keep, device), segments, read_len)
