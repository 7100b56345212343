"""Rows and greedy sampling settings for tests that call a proposer directly."""

from __future__ import annotations

import numpy as np
import torch

from adaptivespec.engine.rows import RowState
from adaptivespec.engine.sampling import BatchSampling

from ..conftest import TEST_DEVICE


def rows_of(*histories: list[int], width: int = 64) -> RowState:
    """One row per history, each holding it whole."""
    rows = RowState.allocate(len(histories), width, torch.device(TEST_DEVICE))
    for r, history in enumerate(histories):
        rows.write_prompt(r, history)
        rows.set_lens(r, [len(history)])
    return rows


def greedy(batch: int) -> BatchSampling:
    ones = torch.ones(batch)
    flags = np.ones(batch, dtype=bool)
    return BatchSampling(
        ones,
        ones,
        ones.bool(),
        [0] * batch,
        np.zeros(batch, np.int64),
        flags,
        all_greedy=True,
        any_top_p=False,
    )
