"""A transformers model bound to its slot KV cache: one ragged forward at a time."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from adaptivespec.engine.attention import AttentionSpec
from adaptivespec.engine.kvcache import CacheShape, SlotKVCache
from adaptivespec.engine.ragged import RaggedLayout


@dataclass(slots=True)
class ForwardClock:
    """Accumulates wall time spent inside model forwards, to separate it from engine overhead."""

    total: float = field(default=0.0)  # since the start, for whole-run overhead figures
    sync: bool = False  # on cuda, wait for the kernels so the time is real

    def add(self, seconds: float) -> None:
        self.total += seconds


class CachedModel:
    def __init__(self, model: PreTrainedModel, max_batch: int, cache_len: int, clock: ForwardClock) -> None:
        param = next(model.parameters())
        self.model = model
        self.device = param.device
        self.cache = SlotKVCache(
            CacheShape.from_config(model.config, max_batch, cache_len), param.dtype, param.device
        )
        self.clock = clock
        self.dtype = param.dtype
        eager = getattr(model.config, "_attn_implementation", None) == "eager"
        self.attention = AttentionSpec.from_config(model.config, additive=eager)
        # transformers 5.x renamed `past_key_values` to `cache`; accept either.
        params = inspect.signature(model.forward).parameters
        self.cache_kwarg = "cache" if "cache" in params else "past_key_values"

    @property
    def cache_len(self) -> int:
        return self.cache.shape.max_len

    def forward(
        self, row_start: int, input_ids: torch.Tensor, layout: RaggedLayout, last_only: bool
    ) -> torch.Tensor:
        """input_ids [n, T] for rows [row_start, row_start+n) -> logits [n, 1 or T, V]."""
        began = time.perf_counter()
        self.cache.bind(row_start, layout.cols, layout.read_len)
        out = self.model(
            input_ids=input_ids,
            position_ids=layout.positions,
            attention_mask=self.attention.masks(layout, self.dtype),
            use_cache=True,
            logits_to_keep=1 if last_only else 0,
            **{self.cache_kwarg: self.cache},
        )
        if self.clock.sync:
            torch.cuda.synchronize()
        self.clock.add(time.perf_counter() - began)
        return out.logits

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> torch.Tensor:
        """Left-padded batched prefill; row r's chunk lands at columns [starts[r], ...).

        Returns each row's last logits [n, V]. A chunk after the first attends to the columns
        its earlier chunks wrote, so a prompt fed in pieces gives the same cache as one pass.
        """
        count = torch.tensor([len(c) for c in chunks], dtype=torch.long, device=self.device)
        start = torch.tensor(starts, dtype=torch.long, device=self.device)
        layout = RaggedLayout.build(start, count, self.cache_len)
        ids = torch.zeros(layout.cols.shape, dtype=torch.long, device=self.device)
        for r, chunk in enumerate(chunks):
            ids[r, ids.shape[1] - len(chunk) :] = torch.tensor(chunk, device=self.device)
        return self.forward(row_start, ids, layout, last_only=True)[:, -1]
