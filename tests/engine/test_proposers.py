from __future__ import annotations

import numpy as np
import torch

from adaptivespec.engine.proposers import NgramProposer
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.sampling import BatchSampling

from ..conftest import TEST_DEVICE


def _rows(*histories: list[int]) -> RowState:
    rows = RowState.allocate(len(histories), 32, torch.device(TEST_DEVICE))
    for r, history in enumerate(histories):
        rows.write_prompt(r, history)
        rows.set_lens(r, [len(history)])
    return rows


def _greedy(batch: int) -> BatchSampling:
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


def test_ngram_copies_what_followed_the_latest_match() -> None:
    rows = _rows(
        [5, 6, 7, 1, 2, 9, 5, 6, 7, 3, 4, 5, 6, 7],  # "5 6 7" last seen before "3 4"
        [1, 2, 3, 4],  # no repeat at all
        [8, 9, 1, 8, 9],  # only a 2-gram match, followed by "1 8 9"
    )
    proposal = NgramProposer(max_n=3, min_n=2).propose(rows, 3, 4, _greedy(3))
    assert proposal.n_drafts.tolist() == [4, 0, 3]
    assert proposal.drafts[0].tolist() == [3, 4, 5, 6]
    assert proposal.drafts[2, :3].tolist() == [1, 8, 9]
