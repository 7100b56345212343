"""Proposers draft K tokens per row for the target to verify in one pass.

Both sit behind `Proposer`. The draft-model proposer keeps its own slot KV cache, which may
lag behind the target: by a token or two after a drafting step (the bonus token), and by
every token of the steps run at K = 0, which never touch the drafter. A short lag rides in
drafting's first forward, which takes each row's columns since its cache ends: the bonus
token's, and a few steps at K = 0 (an exploration of speculation off, or a dwell there). A
few more columns cost that forward far less than a forward of their own, whose fixed cost
was most of what a switch back on cost (docs/decisions.md, 2026-12-07, sixth entry). A long
lag is what switching speculation back on after a spell off costs: it is caught up in one
batched pass of its own, timed apart (`Proposal.catch_up`), so that the controller can price
the switch instead of reading it as the arm's step cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from transformers import PreTrainedModel

from adaptivespec.engine.cached_model import CachedModel, ForwardClock, Mark
from adaptivespec.engine.ragged import RaggedLayout
from adaptivespec.engine.rows import RowState, upload
from adaptivespec.engine.sampling import BatchSampling, choices

# A row at most this far behind is fed in drafting's first forward: a drafting step leaves it
# 2 behind (its bonus token and the last draft's input), and each step at K = 0 one more, so
# up to 6 steps off (more than a dwell) ride in the forward. Further behind, the drafter sat
# out a spell at K = 0 and catches up apart.
FOLDED_LAG = 8


@dataclass(frozen=True, slots=True)
class CatchUp:
    """A drafter that sat idle feeding it what it missed: its tokens, and its forward's marks."""

    tokens: int
    began: Mark
    ended: Mark


@dataclass(frozen=True, slots=True)
class Proposal:
    drafts: torch.Tensor  # [B, K] long, on the device
    n_drafts: torch.Tensor  # [B] long, on the device: drafts actually proposed per row (<= K)
    host_n_drafts: np.ndarray  # [B] int64, the same counts on the host, so the step's width needs no read
    catch_up: CatchUp | None = None  # this step's switch cost, when the drafter had sat idle


class Proposer(Protocol):
    name: str  # what it drafts with, for the model key
    method: str  # its kind ("ngram", "draft", "suffix"): what the controller chooses among
    # Every row gets exactly K drafts, so the verify pass's layout can be built before drafting.
    full_width: bool

    @property
    def nbytes(self) -> int: ...

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> None: ...

    def propose(self, rows: RowState, batch: int, k: int, sampling: BatchSampling) -> Proposal: ...

    def commit(self, batch: int, old_lens: np.ndarray, accepted: np.ndarray) -> None:
        """After verification, with the host's copies of the lengths before it and of the acceptances."""
        ...

    def move_rows(self, srcs: list[int], dsts: list[int], upto: int) -> None: ...

    def retire_rows(self, rows: RowState, indices: list[int]) -> None:
        """The requests in these rows are over, and the rows are about to take others (the
        host copies still hold them): a drafter that learns from earlier requests takes them
        now, whether or not it drafted for them."""
        ...

    def forget(self) -> None:
        """Drops what it learned from earlier requests, for benchmarks that replay the same
        requests to each contender; the rows must be prefilled again before the next draft."""
        ...

    def close(self) -> None:
        """Lets go of what it holds on the target (hooks); the runner is done with it."""
        ...


class DraftModelProposer:
    """Drafts with a small causal LM that shares the target's tokenizer.

    The two models' logit widths may differ (padded embedding tables): drafts are drawn
    only among the ids both have. A sampled row's draft is the Gumbel-max of the draft's own
    distribution under the noise the target will use at that position (sampling.py).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        name: str,
        max_batch: int,
        cache_len: int,
        clock: ForwardClock,
        *,
        target_width: int | None = None,
    ) -> None:
        self.name = name
        self.method = "draft"
        self.full_width = True
        self.draft = CachedModel(model, max_batch, cache_len, clock)
        own_width = int(model.get_output_embeddings().weight.shape[0])
        self.target_width = target_width or own_width
        self.shared_width = min(own_width, self.target_width)
        self.cached = np.zeros(max_batch, dtype=np.int64)  # [max_batch] columns each row's draft cache holds

    @property
    def nbytes(self) -> int:
        return self.draft.cache.nbytes

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> None:
        self.draft.prefill(row_start, chunks, starts)
        ends = [start + len(chunk) for chunk, start in zip(chunks, starts, strict=True)]
        self.cached[row_start : row_start + len(chunks)] = ends

    def propose(self, rows: RowState, batch: int, k: int, sampling: BatchSampling) -> Proposal:
        lens, device = rows.host_lens[:batch], self.draft.device
        idle = int((lens - self.cached[:batch]).max()) > FOLDED_LAG  # it sat out a spell at K = 0
        caught_up = self._catch_up(rows, batch) if idle else None
        cached = self.cached[:batch]
        # Every layout up front, in one run: each build right after a forward would run on
        # caches the forward's weights had evicted.
        first = RaggedLayout.build(cached, lens - cached, self.draft.cache_len, device)
        one = np.ones(batch, dtype=np.int64)
        steps = [RaggedLayout.build(lens + j, one, self.draft.cache_len, device) for j in range(k - 1)]
        ids = rows.tokens[:batch].gather(1, first.gather_index)
        logits = self._forward(ids, first)
        drafts: list[torch.Tensor] = []
        for j in range(k):
            token = choices(logits.unsqueeze(1), sampling, self.target_width, offset=j)[:, 0]
            drafts.append(token)
            if j + 1 < k:
                logits = self._forward(token.unsqueeze(1), steps[j])
        self.cached[:batch] = lens + (k - 1)
        n_drafts = torch.full((batch,), k, dtype=torch.long, device=device)
        return Proposal(torch.stack(drafts, dim=1), n_drafts, np.full(batch, k, dtype=np.int64), caught_up)

    def _catch_up(self, rows: RowState, batch: int) -> CatchUp:
        """Feeds every row all it missed but its last token, which drafting's first forward
        takes as usual; a row with nothing to catch up rides along as padding (its outputs
        are not read, and pads write only the cache's sink column)."""
        lens, cached = rows.host_lens[:batch], self.cached[:batch]
        missed = np.maximum(lens - 1 - cached, 0)
        layout = RaggedLayout.build(cached, missed, self.draft.cache_len, self.draft.device)
        began = self.draft.clock.mark()
        self.draft.forward(0, rows.tokens[:batch].gather(1, layout.gather_index), layout, last_only=True)
        ended = self.draft.clock.mark()
        self.cached[:batch] = cached + missed
        return CatchUp(int(missed.sum()), began, ended)

    def commit(self, batch: int, old_lens: np.ndarray, accepted: np.ndarray) -> None:
        self.cached[:batch] = np.minimum(self.cached[:batch], old_lens + accepted)

    def move_rows(self, srcs: list[int], dsts: list[int], upto: int) -> None:
        device = self.draft.device
        self.draft.cache.move_rows(upload(srcs, device), upload(dsts, device), upto)
        self.cached[dsts] = self.cached[srcs]

    def retire_rows(self, rows: RowState, indices: list[int]) -> None:
        return None  # it learns nothing across requests

    def forget(self) -> None:
        return None  # it learns nothing across requests

    def close(self) -> None:
        return None

    def _forward(self, ids: torch.Tensor, layout: RaggedLayout) -> torch.Tensor:
        return self.draft.forward(0, ids, layout, last_only=True, step=True)[
            :, -1, : self.shared_width
        ]  # [B, V]


class NgramProposer:
    """Prompt lookup: copies what followed the most recent earlier match of the last n tokens,
    the longest n from max_n down to min_n that has one. A 1-gram match (a last token seen
    before) drafts at most `unigram_drafts` tokens: its first draft is kept far less often than
    a longer match's, and on a runtime that verifies each row's own drafts every draft costs
    its share of the step (docs/decisions.md, 2026-12-06, fourth entry).

    It searches the host's copy of the tokens, as vLLM's does, so that how many drafts each
    row has is known without reading the device. The sizes' defaults are ModelConfig's.
    """

    def __init__(self, max_n: int, min_n: int, unigram_drafts: int | None = None) -> None:
        """`unigram_drafts`: None drafts K from any match, as vLLM's prompt lookup does."""
        capped = min_n == 1 and unigram_drafts is not None
        self.name = f"ngram{min_n}-{max_n}" + (f"u{unigram_drafts}" if capped else "")
        self.method = "ngram"
        self.full_width = False  # a row without a match, or near its end, has fewer
        self.max_n = max_n
        self.min_n = min_n
        self.unigram_drafts = unigram_drafts if capped else None

    @property
    def nbytes(self) -> int:
        return 0

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> None:
        return None

    def propose(self, rows: RowState, batch: int, k: int, sampling: BatchSampling) -> Proposal:
        drafts, n_drafts = self.draft_rows(rows, np.arange(batch), k)
        device = rows.tokens.device
        return Proposal(upload(drafts, device), upload(n_drafts, device), n_drafts)

    def draft_rows(self, rows: RowState, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """[n, K] drafts and [n] counts for the rows in `indices`, from the host's tokens."""
        drafts = np.zeros((len(indices), k), dtype=np.int64)  # [n, K]
        counts = np.zeros(len(indices), dtype=np.int64)  # [n]
        lens = rows.host_lens[indices].tolist()
        for i, (row, length) in enumerate(zip(indices.tolist(), lens, strict=True)):
            tokens = rows.host_tokens[row, :length]
            follow, n = self._latest_match(tokens)
            if follow < 0:
                continue
            count = min(length - follow, k)
            if n == 1 and self.unigram_drafts is not None:
                count = min(count, self.unigram_drafts)
            drafts[i, :count] = tokens[follow : follow + count]
            counts[i] = count
        return drafts, counts

    def _latest_match(self, tokens: np.ndarray) -> tuple[int, int]:
        """tokens [L], a row's: (index of the token after the latest earlier match of its last
        n tokens, n), for the longest n that has one; (-1, 0) if none does.

        A search over the row's bytes (int64 tokens) rather than numpy comparisons over every
        position: a step's host work runs right after the target's forward, with cold caches,
        where each of the many small numpy operations the comparisons take costs several times
        what it does alone (docs/results.md). A byte match at a position that is not a whole
        token is skipped by searching again to its left."""
        length, size, text = len(tokens), tokens.itemsize, tokens.tobytes()
        for n in range(self.max_n, self.min_n - 1, -1):
            if length - n < 1:
                continue
            pattern = text[(length - n) * size :]
            end = (length - 1) * size  # strictly earlier: the match ends before the last token
            while (at := text.rfind(pattern, 0, end)) >= 0:
                if at % size == 0:
                    return at // size + n, n
                end = at + len(pattern) - 1  # a match starting left of `at` may still end inside it
        return -1, 0

    def commit(self, batch: int, old_lens: np.ndarray, accepted: np.ndarray) -> None:
        return None

    def move_rows(self, srcs: list[int], dsts: list[int], upto: int) -> None:
        return None

    def retire_rows(self, rows: RowState, indices: list[int]) -> None:
        return None  # it drafts from each row's own tokens only

    def forget(self) -> None:
        return None

    def close(self) -> None:
        return None
