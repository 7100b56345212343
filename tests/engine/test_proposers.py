from __future__ import annotations

import numpy as np

from adaptivespec.config import ModelConfig
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


def test_ngram_by_default_drafts_from_a_last_token_seen_before() -> None:
    rows = rows_of(
        [4, 7, 8, 5, 4, 9, 3, 4],  # only the last token repeats: its latest match is followed by "9 3 4"
        [1, 2, 3, 9, 2, 3, 5, 1, 2, 3],  # "2 3" and "1 2 3" match: the longest wins
        [1, 2, 3, 4],  # nothing repeats
    )
    served = ModelConfig()  # what serve loads
    lookup = NgramProposer(served.ngram_max, served.ngram_min, served.ngram_unigram_drafts)
    proposal = lookup.propose(rows, 3, 4, greedy(3))
    # The 1-gram match drafts its first two tokens only; the 3-gram match drafts K.
    assert proposal.n_drafts.tolist() == [2, 4, 0]
    assert proposal.drafts[0, :2].tolist() == [9, 3]
    assert proposal.drafts[1].tolist() == [9, 2, 3, 5]
    assert lookup.name == "ngram1-3u2"
    uncapped = NgramProposer(served.ngram_max, served.ngram_min).propose(rows, 3, 4, greedy(3))
    assert uncapped.n_drafts.tolist() == [3, 4, 0]  # vLLM's rule: K from any match
    assert NgramProposer(max_n=3, min_n=2).propose(rows, 3, 4, greedy(3)).n_drafts.tolist() == [0, 4, 0]


def _latest_match_by_definition(history: list[int], max_n: int, min_n: int) -> tuple[int, int]:
    """The index after the latest earlier occurrence of the last n tokens, longest n first."""
    for n in range(max_n, min_n - 1, -1):
        last = history[-n:]
        for start in range(len(history) - n - 1, -1, -1):  # none where the history is too short
            if history[start : start + n] == last:
                return start + n, n
    return -1, 0


def test_ngram_drafts_match_their_definition_also_where_bytes_match_across_tokens() -> None:
    # Token ids whose bytes line up across neighbouring tokens (1 followed by 256, 2**40, ...)
    # make byte matches at positions that are not whole tokens: the search must skip them.
    rng = np.random.default_rng(0)
    alphabet = np.array([0, 1, 2, 256, 257, 65536, 2**32, 2**40 + 1, 49151])
    lookup = NgramProposer(max_n=3, min_n=1, unigram_drafts=2)
    checked = matched = 0
    for _ in range(400):
        histories = [rng.choice(alphabet, size=int(rng.integers(1, 40))).tolist() for _ in range(4)]
        rows = rows_of(*histories)
        drafts, counts = lookup.draft_rows(rows, np.arange(4), 5)
        for r, history in enumerate(histories):
            follow, n = _latest_match_by_definition(history, 3, 1)
            expected = [] if follow < 0 else history[follow : follow + (2 if n == 1 else 5)]
            assert counts[r] == len(expected), (history, drafts[r], counts[r])
            assert drafts[r, : counts[r]].tolist() == expected
            checked += 1
            matched += follow >= 0
    assert checked == 1600 and 0.3 < matched / checked < 0.99  # both kinds of row were seen
