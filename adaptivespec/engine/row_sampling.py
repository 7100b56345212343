"""Each runner row's sampling settings, on the device for the kernels and on the host for the
decisions a step makes without reading the device (all greedy? any top-p?)."""

from __future__ import annotations

import numpy as np
import torch

from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SAMPLING_DTYPE, BatchSampling


class RowSampling:
    def __init__(self, rows: int, device: torch.device) -> None:
        self._temperature = torch.ones(rows, dtype=SAMPLING_DTYPE, device=device)
        self._top_p = torch.ones(rows, dtype=SAMPLING_DTYPE, device=device)
        self._greedy = torch.ones(rows, dtype=torch.bool, device=device)
        self._host_greedy = np.ones(rows, dtype=bool)
        self._host_top_p = np.ones(rows)
        self._seeds = [0] * rows  # each row's request seed: its sampling noise comes from it

    def set(self, row: int, item: PrefillItem) -> None:
        """The settings of the request that `row` now holds."""
        params = item.params
        self._greedy[row] = params.greedy
        self._temperature[row] = 1.0 if params.greedy else params.temperature
        self._top_p[row] = params.top_p
        self._host_greedy[row] = params.greedy
        self._host_top_p[row] = params.top_p
        self._seeds[row] = item.seed

    def of(self, rows: slice, positions: np.ndarray) -> BatchSampling:
        """The rows' settings for one pass; `positions`: the index each row's next token takes."""
        return BatchSampling(
            self._temperature[rows],
            self._top_p[rows],
            self._greedy[rows],
            self._seeds[rows],
            positions,
            self._host_greedy[rows],
            all_greedy=bool(self._host_greedy[rows].all()),
            any_top_p=bool((self._host_top_p[rows] < 1.0).any()),
        )

    def move(self, srcs: list[int], dsts: list[int], src: torch.Tensor, dst: torch.Tensor) -> None:
        """Rows move with their requests; `src`, `dst`: the same indices on the device."""
        for values in (self._temperature, self._top_p, self._greedy):
            values[dst] = values[src]
        for host in (self._host_greedy, self._host_top_p):
            host[dsts] = host[srcs]
        for s, d in zip(srcs, dsts, strict=True):
            self._seeds[d] = self._seeds[s]
