"""A transformers model bound to its slot KV cache: one ragged forward at a time."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedModel

from adaptivespec.engine.attention import AttentionSpec
from adaptivespec.engine.cache_keyword import cache_keyword
from adaptivespec.engine.compiled_forward import CompiledForward
from adaptivespec.engine.kvcache import CacheShape, SlotKVCache
from adaptivespec.engine.packed_gqa import NAME as PACKED_GQA
from adaptivespec.engine.ragged import RaggedLayout
from adaptivespec.engine.rows import upload
from adaptivespec.engine.segments import SegmentLayout

Mark = float | torch.cuda.Event  # a point in time: perf_counter seconds, or an event on the stream


@dataclass(slots=True)
class ForwardClock:
    """Time spent inside model forwards, to separate it from engine overhead.

    On cuda a forward returns before its kernels have run, and waiting for them would stall
    the step. There each mark is an event on the stream, and spans are added up by
    `settle`, which the runner calls after it has read the step's tokens back, when every
    event has completed.
    """

    on_cuda: bool = False
    total: float = 0.0  # seconds in forwards since the start, for whole-run overhead figures
    _pending: list[tuple[Mark, Mark]] = field(default_factory=list)

    def mark(self) -> Mark:
        if not self.on_cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def add(self, began: Mark, ended: Mark) -> None:
        self._pending.append((began, ended))

    def settle(self) -> None:
        self.total += sum(self.between(began, ended) for began, ended in self._pending)
        self._pending.clear()

    @staticmethod
    def between(began: Mark, ended: Mark) -> float:
        """Seconds from one mark to a later one; on cuda, only once both events have completed."""
        if isinstance(began, float) and isinstance(ended, float):
            return ended - began
        if isinstance(began, torch.cuda.Event) and isinstance(ended, torch.cuda.Event):
            return began.elapsed_time(ended) / 1000.0
        raise TypeError("marks of different clocks")


class CachedModel:
    def __init__(self, model: PreTrainedModel, max_batch: int, cache_len: int, clock: ForwardClock) -> None:
        param = next(model.parameters())
        self.model = model
        self.device = param.device
        self.runtime = "torch"
        self.cache = SlotKVCache(
            CacheShape.from_config(model.config, max_batch, cache_len), param.dtype, param.device
        )
        self.clock = clock
        self.dtype = param.dtype
        eager = getattr(model.config, "_attn_implementation", None) == "eager"
        self.attention = AttentionSpec.from_config(model.config, additive=eager)
        self.cache_kwarg = cache_keyword(model.forward)
        self.compiled: CompiledForward | None = None

    def compile(self) -> None:
        """From now on the step's passes run compiled (see compiled_forward.py); prompts stay eager."""
        if self.compiled is None:
            self.compiled = CompiledForward(self.model)

    @property
    def cache_len(self) -> int:
        return self.cache.shape.max_len

    def forward(
        self,
        row_start: int,
        input_ids: torch.Tensor,
        layout: RaggedLayout,
        last_only: bool,
        step: bool = False,
        *,
        counts: np.ndarray | None = None,
    ) -> torch.Tensor:
        """input_ids [n, T] for rows [row_start, row_start+n) -> logits [n, 1 or T, V].

        `step` marks a decode step's pass (a token or a few per row), which may run compiled.
        `counts` is not used: every row's T tokens are computed (`skips_pads` is False), as
        one rectangular pass, the shape a compiled step and the batched attention take.
        """
        began = self.clock.mark()
        self.cache.bind(row_start, layout.cols, layout.read_len)
        inputs = {
            "input_ids": input_ids,
            "position_ids": layout.positions,
            "attention_mask": self.attention.masks(layout, self.dtype),
            "use_cache": True,
            "logits_to_keep": 1 if last_only else 0,
            self.cache_kwarg: self.cache,
        }
        out = self.model(**inputs) if self.compiled is None else self.compiled(step=step, **inputs)
        self.clock.add(began, self.clock.mark())
        return out.logits

    @property
    def skips_pads(self) -> bool:
        return False

    @property
    def runs_segments(self) -> bool:
        """Whether a decode step and prompt chunks can share one forward (segments.py): only
        through our attention function, on full-attention layers, and eager."""
        implementation = getattr(self.model.config, "_attn_implementation", None)
        return implementation == PACKED_GQA and self.attention.window is None and self.compiled is None

    def forward_segments(self, ids: torch.Tensor, layout: SegmentLayout) -> torch.Tensor:
        """ids [1, T] laid out as `layout` says -> logits [B + chunks, V], each row's last token."""
        began = self.clock.mark()
        self.cache.bind_flat(layout.rows, layout.cols, layout.segments.rows, layout.read_len)
        out = self.model(
            input_ids=ids,
            position_ids=layout.positions,
            attention_mask=layout.segments.decode_mask,  # 4-D, so transformers builds none; unused
            use_cache=True,
            logits_to_keep=layout.keep,
            segments=layout.segments,
            **{self.cache_kwarg: self.cache},
        )
        self.clock.add(began, self.clock.mark())
        return out.logits[0]

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> torch.Tensor:
        """Left-padded batched prefill; row r's chunk lands at columns [starts[r], ...).

        Returns each row's last logits [n, V]. A chunk after the first attends to the columns
        its earlier chunks wrote, so a prompt fed in pieces gives the same cache as one pass.
        """
        count = np.array([len(c) for c in chunks], dtype=np.int64)
        layout = RaggedLayout.build(np.asarray(starts, dtype=np.int64), count, self.cache_len, self.device)
        ids = np.zeros(layout.cols.shape, dtype=np.int64)  # [n, T], left-padded
        for r, chunk in enumerate(chunks):
            ids[r, ids.shape[1] - len(chunk) :] = chunk
        return self.forward(row_start, upload(ids, self.device), layout, last_only=True)[:, -1]
