"""The decision cells, keyed (context bucket, batch bucket): which changed since the last save,
and what a cell learns from the cells beside it (a borrowed decision, cost floors, pruning).

An unvisited cell borrows the decision of the nearest visited one (from a smaller batch, what
that one lends a larger: speculation off where its decision ties off); a visited cell takes
step-time floors and ruled-out arms from the nearest smaller visited batch bucket (see
`Neighbourhood` for why those hold).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from adaptivespec.controller.arms import Arm
from adaptivespec.controller.buckets import batch_bucket, context_bucket
from adaptivespec.controller.cell import Cell, Neighbourhood
from adaptivespec.controller.learning_settings import LearningSettings
from adaptivespec.controller.step_costs import relative_cost_ceiling, relative_cost_floor

CellKey = tuple[int, int]  # (context bucket, batch bucket)


def cell_key(batch_size: int, context_len: int) -> CellKey:
    """The cell a step of this batch size and context length counts in."""
    return context_bucket(context_len), batch_bucket(batch_size)


class CellTable(Mapping[CellKey, Cell]):
    def __init__(self, settings: LearningSettings, arms: tuple[Arm, ...]) -> None:
        self._settings, self._arms = settings, arms
        self._cells: dict[CellKey, Cell] = {}
        self._dirty: set[CellKey] = set()  # cells whose statistics changed since the last save

    def __getitem__(self, key: CellKey) -> Cell:
        return self._cells[key]

    def __iter__(self) -> Iterator[CellKey]:
        return iter(self._cells)

    def __len__(self) -> int:
        return len(self._cells)

    def cell(self, key: CellKey, prior: Arm) -> Cell:
        """The cell at `key`; a new one starts from the nearest visited cell's decision, or
        from `prior` when none was visited."""
        cell = self._cells.get(key)
        if cell is None:
            borrowed = self.nearest_decision(key)
            cell = Cell.starting_at(self._settings, self._arms, prior if borrowed is None else borrowed)
            self._cells[key] = cell
        return cell

    def changed(self, key: CellKey) -> None:
        self._dirty.add(key)

    def take_changed(self) -> frozenset[CellKey]:
        """The cells changed since the last take; they count as saved until `give_back`."""
        taken = frozenset(self._dirty)
        self._dirty.clear()
        return taken

    def give_back(self, keys: frozenset[CellKey]) -> None:
        self._dirty |= keys

    def clear(self) -> None:
        self._cells.clear()
        self._dirty.clear()

    def informed_rows(self) -> set[int]:
        """Context buckets with an informed cell."""
        return {ctx for (ctx, _), cell in self._cells.items() if cell.informed}

    def nearest_decision(self, key: CellKey) -> Arm | None:
        """The decision of the nearest visited cell: same context first (nearest batch), then the
        nearest context with a visited cell at the nearest batch; None when nothing was visited.
        At equal distance the smaller bucket wins. From a smaller batch, what it lends a larger
        one (`Cell.lent_to_larger_batch`).

        It walks the visited cells, not the grid around `key`: the publisher asks it for every
        unvisited cell whenever a decision changes, and the grid is mostly unvisited.
        """
        ctx, batch = key

        def distance(at: CellKey) -> tuple[int, bool, int, bool]:
            c, b = at
            return abs(c - ctx), c > ctx, abs(b - batch), b > batch

        visited = [k for k, cell in self._cells.items() if cell.informed and k != key]
        if not visited:
            return None
        nearest = min(visited, key=distance)
        cell = self._cells[nearest]
        return cell.lent_to_larger_batch if nearest[1] < batch else cell.decided

    def neighbourhood(self, key: CellKey) -> Neighbourhood:
        """What the nearest smaller visited batch bucket implies for this cell.

        Cost floors come from one hop only: what lies further down already reached that bucket
        through its own pruning (`ruled_out`), and walking the whole chain on every re-prune
        was measurably slow.
        """
        smaller = self._smaller_neighbour(key)
        if smaller is None:
            return Neighbourhood()
        here, there = self._cells[key], self._cells[smaller]
        here_times, there_times = here.evidence.times(), there.evidence.times()
        return Neighbourhood(
            relative_cost_floor(here_times, there_times),
            there.ruled_out,
            relative_cost_ceiling(here_times, there_times),
        )

    def _smaller_neighbour(self, key: CellKey) -> CellKey | None:
        """The nearest smaller visited batch bucket, batch 1 excepted.

        A batch-1 plain step takes other kernels (GEMV, not GEMM), so batch 1 says nothing about
        how cost grows with K at larger batches.
        """
        ctx, batch = key
        for smaller in range(batch - 1, 0, -1):
            cell = self._cells.get((ctx, smaller))
            if cell is not None and cell.informed:
                return ctx, smaller
        return None
