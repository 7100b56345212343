from __future__ import annotations

from adaptivespec.engine.proposers import NgramProposer

from .drafting import greedy, rows_of


def test_ngram_copies_what_followed_the_latest_match() -> None:
    rows = rows_of(
        [5, 6, 7, 1, 2, 9, 5, 6, 7, 3, 4, 5, 6, 7],  # "5 6 7" last seen before "3 4"
        [1, 2, 3, 4],  # no repeat at all
        [8, 9, 1, 8, 9],  # only a 2-gram match, followed by "1 8 9"
    )
    proposal = NgramProposer(max_n=3, min_n=2).propose(rows, 3, 4, greedy(3))
    assert proposal.n_drafts.tolist() == [4, 0, 3]
    assert proposal.drafts[0].tolist() == [3, 4, 5, 6]
    assert proposal.drafts[2, :3].tolist() == [1, 8, 9]
