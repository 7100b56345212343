"""The flattened layout of a decode step with prompt chunks: where each token writes and what it sees."""

from __future__ import annotations

import numpy as np
import torch

from adaptivespec.engine.segments import SegmentLayout


def test_decode_rows_then_chunks_write_their_own_rows_and_read_only_their_own_columns() -> None:
    decode_lens = np.array([3, 5], dtype=np.int64)  # rows 0 and 1 feed their last token
    layout = SegmentLayout.build(decode_lens, np.array([0, 6]), np.array([4, 3]), torch.device("cpu"))
    assert layout.rows.tolist() == [[0, 1, 2, 2, 2, 2, 3, 3, 3]]
    assert layout.cols.tolist() == [[2, 4, 0, 1, 2, 3, 6, 7, 8]]
    assert torch.equal(layout.positions, layout.cols)
    assert layout.keep.tolist() == [0, 1, 5, 8]  # each row's last token
    assert layout.read_len == 9
    segments = layout.segments
    assert segments.rows == 4 and segments.chunk_offsets == (2, 6)
    # decode rows see up to their own last column, over the longest decode row only
    assert segments.decode_mask.shape == (2, 1, 1, 5)
    assert segments.decode_mask[:, 0, 0].tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    # a chunk sees its earlier columns and itself, causally, over its own columns only
    first, second = segments.chunk_masks
    assert first.shape == (1, 1, 4, 4) and torch.equal(first[0, 0], torch.ones(4, 4).tril().bool())
    assert second.shape == (1, 1, 3, 9)
    assert second[0, 0].sum(dim=1).tolist() == [7, 8, 9]


def test_segment_attention_equals_each_row_attending_alone() -> None:
    torch.manual_seed(0)
    decode_lens = np.array([3, 5], dtype=np.int64)
    layout = SegmentLayout.build(decode_lens, np.array([2]), np.array([4]), torch.device("cpu"))
    heads, kv_heads, dim, length = 4, 2, 8, layout.read_len
    key, value = torch.randn(3, kv_heads, length, dim), torch.randn(3, kv_heads, length, dim)
    query = torch.randn(1, heads, 6, dim)

    def group(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return out.transpose(1, 2)  # [n, T, H, d]

    out = layout.segments.attend(query, key, value, group)  # [1, 6, H, d]
    for token, (row, col) in enumerate(zip(layout.rows[0].tolist(), layout.cols[0].tolist(), strict=True)):
        q = query[:, :, token : token + 1]
        k, v = key[row : row + 1, :, : col + 1], value[row : row + 1, :, : col + 1]
        alone = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.testing.assert_close(out[0, token], alone[0, :, 0])
