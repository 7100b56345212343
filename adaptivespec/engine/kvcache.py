"""Preallocated KV cache in which every batch row writes at its own columns.

Speculative acceptance is ragged: each row keeps a different number of the tokens it
verified. Instead of masking the rejected columns as holes (and compacting later), each
row's next write simply starts at its own length, so rejected entries are overwritten and
the cache never holds holes. Reads return a view over the live rows and columns, so the
cost of a step follows the longest live sequence, not the preallocated size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PretrainedConfig
from transformers.cache_utils import Cache


@dataclass(frozen=True, slots=True)
class CacheShape:
    num_layers: int
    max_batch: int
    kv_heads: int
    max_len: int
    head_dim: int

    @classmethod
    def from_config(cls, config: PretrainedConfig, max_batch: int, max_len: int) -> CacheShape:
        config = config.get_text_config()  # multimodal models nest the language model's config
        heads = int(config.num_attention_heads)
        head_dim = getattr(config, "head_dim", None) or int(config.hidden_size) // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        return cls(int(config.num_hidden_layers), max_batch, int(kv_heads), max_len, int(head_dim))

    def row_bytes(self, dtype: torch.dtype) -> int:
        """What one row takes: keys and values of every layer, `max_len` positions."""
        itemsize = torch.empty(0, dtype=dtype).element_size()
        return 2 * self.num_layers * self.kv_heads * self.max_len * self.head_dim * itemsize


class SlotKVCache(Cache):
    """A transformers `Cache` whose `update` scatters into preallocated per-row columns."""

    def __init__(self, shape: CacheShape, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(layers=[])
        self.shape = shape
        dims = (shape.max_batch, shape.kv_heads, shape.max_len, shape.head_dim)
        # Zeros, not empty: a masked column must never hold NaN, which would survive masking.
        self.keys = [torch.zeros(dims, dtype=dtype, device=device) for _ in range(shape.num_layers)]
        self.values = [torch.zeros(dims, dtype=dtype, device=device) for _ in range(shape.num_layers)]
        self._rows = slice(0, 0)  # the rows a forward reads
        self._row_index = torch.zeros(0, 1, dtype=torch.long, device=device)  # [n, 1], or [1, T] flattened
        self._cols = torch.zeros(0, 0, dtype=torch.long, device=device)  # [n, T], or [1, T] flattened
        self._read_len = 0

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def bind(self, row_start: int, cols: torch.Tensor, read_len: int) -> None:
        """Aim the next forward's writes at rows [row_start, row_start+n) and columns `cols` [n, T]."""
        n = cols.shape[0]
        self._rows = slice(row_start, row_start + n)
        self._row_index = torch.arange(row_start, row_start + n, device=cols.device).unsqueeze(1)
        self._cols = cols
        self._read_len = read_len

    def bind_flat(self, rows: torch.Tensor, cols: torch.Tensor, row_count: int, read_len: int) -> None:
        """Aim a flattened forward's writes: token t of [1, T] goes to row rows[0, t], column
        cols[0, t]; reads return rows [0, row_count) (see segments.py)."""
        self._rows = slice(0, row_count)
        self._row_index = rows
        self._cols = cols
        self._read_len = read_len

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *args: object,
        **kwargs: object,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        # key_states: [n, kv_heads, T, head_dim]; advanced indexing puts [n, T] first (n = 1 flattened).
        keys[self._row_index, :, self._cols] = key_states.transpose(1, 2).to(keys.dtype)
        values[self._row_index, :, self._cols] = value_states.transpose(1, 2).to(values.dtype)
        return keys[self._rows, :, : self._read_len], values[self._rows, :, : self._read_len]

    @property
    def write_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Where the bound forward writes: rows and columns, broadcastable to its tokens [n, T]
        (for what else is kept per token beside the cache, such as a drafter's hidden states)."""
        return self._row_index, self._cols

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._read_len

    def move_rows(self, srcs: torch.Tensor, dsts: torch.Tensor, upto: int) -> None:
        """Copy rows srcs -> dsts (disjoint sets) for the first `upto` columns."""
        for layer in (*self.keys, *self.values):
            layer[dsts, :, :upto] = layer[srcs, :, :upto]
