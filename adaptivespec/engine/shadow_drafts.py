"""Drafts a drafter that did not run would have made, scored against what the target then wrote.

With several drafters, the controller learns a drafter's acceptance only from the steps that
run it, so each new cell spends steps on drafters whose acceptance is barely known. The cheap
drafters (prompt lookup, suffix trees: host work over a row's tokens, no forward, no state
the target's cache depends on) can draft beside the one a step runs, for a few rows a step,
and be scored once the row's output covers their drafts. The controller then knows what each
of them keeps before it spends a step on it (docs/decisions.md).

Why a match is what a verify would have kept: these drafts are one token per position, with
no distribution of their own. Verification keeps such a draft d with probability p(d) (greedy:
iff d is the argmax; sampled: iff the coupled sample is d), and the target writes d at that
position with the same probability, whatever drafted: "the output matched the first j drafts"
is distributed as "the verify kept j drafts" would have been. A shadow draft is scored only
once the row's output covers all its positions: scored earlier, where the running drafter's
step cut the output short, the later positions would be judged only on rows whose text the
running drafter found easy, and read too high.

Only steps that draft carry shadows: a step at K = 0 does no proposer work at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from adaptivespec.engine.rows import RowState
from adaptivespec.engine.runner import ShadowScore
from adaptivespec.engine.telemetry import survival_counts

# Rows a step drafts beside the running drafter, per other drafter, in turn over the batch: a
# bounded host cost per step at any batch size, and at batch 1 every step.
ROWS_PER_STEP = 4


@runtime_checkable
class HostDrafter(Protocol):
    method: str

    def draft_rows(self, rows: RowState, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to K drafts for each row in `indices` ([n] int64) from the host's copy of its
        tokens: [n, K] drafts and [n] counts."""
        ...


@dataclass(frozen=True, slots=True)
class _Pending:
    start: int  # the row's length when drafted: the first draft's position
    drafts: np.ndarray  # [n] int64, n <= horizon


class ShadowDrafts:
    def __init__(
        self, drafters: Sequence[HostDrafter], horizon: int, rows_per_step: int = ROWS_PER_STEP
    ) -> None:
        """`horizon`: drafts per shadow (the largest K the runner verifies)."""
        self.horizon = horizon
        self.rows_per_step = rows_per_step
        self._drafters = {drafter.method: drafter for drafter in drafters}
        self._pending: dict[str, dict[int, list[_Pending]]] = {method: {} for method in self._drafters}
        self._turn = 0  # the next row to draft for, so that every row takes its turn

    def draft(self, rows: RowState, batch: int, running: str) -> None:
        """Every host drafter but `running` drafts for the next few rows of [0, batch)."""
        others = [d for method, d in self._drafters.items() if method != running]
        if not others or self.horizon == 0 or batch == 0:
            return
        count = min(batch, self.rows_per_step)
        indices = (self._turn + np.arange(count)) % batch
        self._turn = int(indices[-1]) + 1
        starts = rows.host_lens[indices].tolist()
        for drafter in others:
            drafts, counts = drafter.draft_rows(rows, indices, self.horizon)
            table = self._pending[drafter.method]
            for i, (row, start) in enumerate(zip(indices.tolist(), starts, strict=True)):
                pending = _Pending(int(start), drafts[i, : int(counts[i])].copy())
                table.setdefault(row, []).append(pending)

    def score(self, rows: RowState, batch: int) -> tuple[ShadowScore, ...]:
        """Scores every shadow of rows [0, batch) whose positions the output now covers."""
        scores = []
        for method, table in self._pending.items():
            kept: list[int] = []
            for row, queue in table.items():
                if row >= batch:
                    continue  # not decoding now: a prefill into it forgets it
                length = int(rows.host_lens[row])
                while queue and queue[-1].start > length:
                    queue.pop()  # the row was rewound below it (benchmarks that hold the context)
                while queue and length >= queue[0].start + self.horizon:
                    shadow = queue.pop(0)
                    written = rows.host_tokens[row, shadow.start : shadow.start + len(shadow.drafts)]
                    match = written == shadow.drafts
                    kept.append(len(match) if match.all() else int(match.argmin()))
            if kept:
                scores.append(
                    ShadowScore(method, self.horizon, len(kept), survival_counts(kept, self.horizon))
                )
        return tuple(scores)

    def forget_rows(self, rows: Sequence[int]) -> None:
        """Rows taking a new request (or the next chunk of one): their shadows go."""
        for table in self._pending.values():
            for row in rows:
                table.pop(row, None)

    def move(self, srcs: Sequence[int], dsts: Sequence[int]) -> None:
        for table in self._pending.values():
            moving = [table.pop(src, None) for src in srcs]
            for dst in dsts:
                table.pop(dst, None)  # its request finished: the moved one takes its place
            for dst, queue in zip(dsts, moving, strict=True):
                if queue:
                    table[dst] = queue

    def forget(self) -> None:
        for table in self._pending.values():
            table.clear()
