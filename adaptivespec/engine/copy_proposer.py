"""Copying drafters, chosen per row: prompt lookup and suffix decoding behind one arm.

Both draft by copying text the host holds: prompt lookup the continuation of the latest
earlier match in the row's own tokens, suffix decoding the most frequent continuation in the
request's tree and the global tree of recent outputs. Which one keeps more changes from
request to request and within one (a code edit copies its input; an agent turn repeats another
request's tool call), so a choice made per cell, for every row of a step, flips as requests
change, and each flip costs the controller steps to learn.

Here each row drafts with both and verifies the longer draft, suffix's on a tie. Suffix
drafts only as far as its match earns (`max_spec_factor` x the match, cut below
`min_token_prob`), so its length is its confidence: a suffix draft at least as long as prompt
lookup's is backed by a match at least that deep, and where suffix finds little, prompt
lookup's latest match (down to one token) still drafts. Replayed over the default model's
greedy outputs this keeps more tokens per verify step than either drafter alone on code edits
and agent turns, about as many as prompt lookup on chat, and most of what a chooser that knew
which draft would be kept reaches (docs/results.md).

Exact as its parts are: each draft is one token per position from the host's text, with no
distribution of its own, so verification treats it as it treats either drafter's.
"""

from __future__ import annotations

import numpy as np

from adaptivespec.engine.proposers import NgramProposer, Proposal
from adaptivespec.engine.rows import RowState, upload
from adaptivespec.engine.sampling import BatchSampling
from adaptivespec.engine.suffix_proposer import SuffixProposer


class CopyProposer:
    """Each row's longer draft of prompt lookup and suffix decoding (suffix's on a tie)."""

    def __init__(self, lookup: NgramProposer, suffix: SuffixProposer) -> None:
        self.lookup = lookup
        self.suffix = suffix
        self.name = lookup.name.replace("ngram", "copy", 1)
        self.method = "copy"
        self.full_width = False  # a row drafts the longer of two drafts that may each fall short

    @property
    def nbytes(self) -> int:
        return 0  # host memory only

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> None:
        self.suffix.prefill(row_start, chunks, starts)

    def propose(self, rows: RowState, batch: int, k: int, sampling: BatchSampling) -> Proposal:
        drafts, n_drafts = self.draft_rows(rows, np.arange(batch), k)
        device = rows.tokens.device
        return Proposal(upload(drafts, device), upload(n_drafts, device), n_drafts)

    def draft_rows(self, rows: RowState, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """[n, K] drafts and [n] counts for the rows in `indices`: per row, the longer draft."""
        looked, n_looked = self.lookup.draft_rows(rows, indices, k)
        found, n_found = self.suffix.draft_rows(rows, indices, k)
        take_suffix = (n_found >= n_looked) & (n_found > 0)  # [n]
        drafts = np.where(take_suffix[:, None], found, looked)  # [n, K]
        return drafts, np.where(take_suffix, n_found, n_looked)

    def commit(self, batch: int, old_lens: np.ndarray, accepted: np.ndarray) -> None:
        return None  # neither part keeps state the verify changes: the trees read committed tokens

    def move_rows(self, srcs: list[int], dsts: list[int], upto: int) -> None:
        self.suffix.move_rows(srcs, dsts, upto)

    def retire_rows(self, rows: RowState, indices: list[int]) -> None:
        self.suffix.retire_rows(rows, indices)

    def forget(self) -> None:
        self.suffix.forget()

    def close(self) -> None:
        return None
