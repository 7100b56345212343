"""Suffix decoding (SuffixDecoding, Arctic Inference; vLLM's `suffix` method).

Each request has a suffix tree over its prompt and its output so far, and one global tree
holds the outputs of the last `max_cached_requests` requests, so that what another request
wrote (a tool call's JSON, an earlier turn's answer) can be drafted too. The draft follows the
most frequent continuation of the longest context matches, and is as long as the match
earns: at most `max_spec_factor` x the match length, cut where the continuation's estimated
probability falls below `min_token_prob`, and never more than K.

The trees are Arctic Inference's own (`arctic_inference.suffix_decoding`, C++), as in vLLM;
`ops/install-suffix.sh` builds it. They see only committed tokens, and only when drafting:
a step at K = 0 never touches them, and the next drafting step feeds them what they missed
(host work, within that step's draft time). So there is nothing to roll back, and output
does not depend on the drafts, only speed does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from adaptivespec.config import SuffixSettings
from adaptivespec.engine.proposers import Proposal
from adaptivespec.engine.rows import RowState, upload
from adaptivespec.engine.sampling import BatchSampling
from adaptivespec.errors import ConfigError

INSTALL_HINT = (
    "--proposer suffix (or copy) needs arctic-inference: run ops/install-suffix.sh, or use --proposer ngram"
)


def suffix_available() -> bool:
    try:
        import arctic_inference.suffix_decoding  # noqa: F401
    except ImportError:
        return False
    return True


class SuffixProposer:
    """Drafts each row from its request's suffix tree and the global tree of recent outputs.

    The proposer sees rows, not requests: a prompt's first chunk into a row starts a new
    request there (ending the one the row held), and row moves carry requests along.
    """

    def __init__(self, settings: SuffixSettings, max_batch: int) -> None:
        try:
            from arctic_inference.suffix_decoding import SuffixDecodingCache
        except ImportError as exc:
            raise ConfigError(INSTALL_HINT) from exc
        self.name = "suffix"
        self.method = "suffix"
        self.full_width = False  # each row drafts what its match earns, 0 to K
        self.settings = settings
        self._cache_type: Any = SuffixDecodingCache
        self.cache: Any = self._fresh_cache()
        self.request = np.full(max_batch, -1, dtype=np.int64)  # [max_batch] request handle per row
        self.prompt_len = np.zeros(max_batch, dtype=np.int64)  # [max_batch] prompt tokens per row
        self.fed = np.full(max_batch, -1, dtype=np.int64)  # [max_batch] tokens in the trees; -1: not started
        self._next_request = 0

    @property
    def nbytes(self) -> int:
        return 0  # host memory only; nothing on the device

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> None:
        for row, (chunk, start) in enumerate(zip(chunks, starts, strict=True), start=row_start):
            if start == 0:
                self._end(row)
                self.request[row] = self._next_request
                self._next_request += 1
            self.prompt_len[row] = start + len(chunk)

    def propose(self, rows: RowState, batch: int, k: int, sampling: BatchSampling) -> Proposal:
        drafts, n_drafts = self.draft_rows(rows, np.arange(batch), k)
        device = rows.tokens.device
        return Proposal(upload(drafts, device), upload(n_drafts, device), n_drafts)

    def draft_rows(self, rows: RowState, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """[n, K] drafts and [n] counts for the rows in `indices`; their trees catch up first."""
        depth, settings = self.settings.max_tree_depth, self.settings
        drafts = np.zeros((len(indices), k), dtype=np.int64)  # [n, K]
        n_drafts = np.zeros(len(indices), dtype=np.int64)  # [n]
        for i, row in enumerate(indices.tolist()):
            end = int(rows.host_lens[row])
            tokens = rows.host_tokens[row]
            self._feed(row, tokens, end)
            context = np.ascontiguousarray(tokens[max(0, end - depth) : end], dtype=np.int32)
            draft = self.cache.speculate(
                int(self.request[row]),
                context,
                max_spec_tokens=k,
                max_spec_factor=settings.max_spec_factor,
                min_token_prob=settings.min_token_prob,
            )
            found = draft.token_ids[:k]
            drafts[i, : len(found)] = found
            n_drafts[i] = len(found)
        return drafts, n_drafts

    def _feed(self, row: int, tokens: np.ndarray, end: int) -> None:
        """Brings the row's trees up to its `end` tokens (the prompt first, at its first draft)."""
        request = int(self.request[row])
        if self.fed[row] < 0:
            prompt = np.ascontiguousarray(tokens[: self.prompt_len[row]], dtype=np.int32)
            self.cache.start_request(request, prompt)
            self.fed[row] = self.prompt_len[row]
        fed = int(self.fed[row])
        if end > fed:
            self.cache.add_active_response(request, np.ascontiguousarray(tokens[fed:end], dtype=np.int32))
        # A row rewound below what the trees hold (benchmarks that hold the context fixed) keeps
        # the trees as they are: they only ever shape the drafts, never the output.
        self.fed[row] = end

    def commit(self, batch: int, old_lens: np.ndarray, accepted: np.ndarray) -> None:
        return None  # the trees take the committed tokens at the next draft

    def move_rows(self, srcs: list[int], dsts: list[int], upto: int) -> None:
        for dst in dsts:
            if dst not in srcs:
                self._end(dst)  # its request finished; the moved one takes its place
        for array in (self.request, self.prompt_len, self.fed):
            array[dsts] = array[srcs]
        vacated = [src for src in srcs if src not in dsts]
        self.request[vacated] = -1
        self.fed[vacated] = -1

    def retire_rows(self, rows: RowState, indices: list[int]) -> None:
        """Each row's request joins the global tree with all of its output, also where this
        drafter never drafted for it (the controller ran it at K = 0 or with another drafter):
        the global tree holds the last requests' outputs, not only the ones it drafted for."""
        for row in indices:
            end = int(rows.host_lens[row])
            if self.request[row] >= 0 and end > self.prompt_len[row]:  # its prompt is in, and output
                self._feed(row, rows.host_tokens[row], end)
            self._end(row)

    def forget(self) -> None:
        """A fresh global tree, and no request in any row."""
        self.cache = self._fresh_cache()
        self.request[:] = -1
        self.fed[:] = -1

    def close(self) -> None:
        return None

    def _fresh_cache(self) -> Any:
        return self._cache_type(self.settings.max_tree_depth, self.settings.max_cached_requests)

    def _end(self, row: int) -> None:
        """Ends the row's request: its prompt tree goes; its output stays in the global tree."""
        if self.fed[row] >= 0:
            self.cache.stop_request(int(self.request[row]))
        self.request[row] = -1
        self.fed[row] = -1
