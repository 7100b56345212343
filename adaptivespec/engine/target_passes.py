"""What the hf runner asks of its target: the passes over its rows' caches.

`CachedModel` runs them with torch on a transformers model and its slot cache;
`OpenVINOTarget` runs them with OpenVINO's paged attention (the `openvino` runtime).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from transformers import PreTrainedModel

from adaptivespec.engine.ragged import RaggedLayout
from adaptivespec.engine.segments import SegmentLayout


class RowCache(Protocol):
    @property
    def nbytes(self) -> int: ...

    def move_rows(self, srcs: torch.Tensor, dsts: torch.Tensor, upto: int) -> None: ...


class TargetPasses(Protocol):
    model: PreTrainedModel  # the transformers model: its embeddings, config and generation config
    device: torch.device
    runtime: str  # what runs the forwards: "torch" or "openvino"

    @property
    def cache(self) -> RowCache: ...

    @property
    def runs_segments(self) -> bool: ...

    @property
    def skips_pads(self) -> bool:
        """Whether `forward` given `counts` computes each row's counted tokens only: a verify
        then costs the drafts each row found, not the longest row's width on every row."""
        ...

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> torch.Tensor: ...

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
        """input_ids [n, T] -> logits [n, 1 or T, V]. `counts` [n] (host): the tokens of each
        row that matter, from its first; a row's logits past its count are finite and
        unspecified, and a target may skip computing them (`skips_pads`)."""
        ...

    def forward_segments(self, ids: torch.Tensor, layout: SegmentLayout) -> torch.Tensor: ...
