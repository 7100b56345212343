"""What a decision cell learns from the cells beside it: a borrowed decision, cost floors, pruning.

Cells are keyed (context bucket, batch bucket). An unvisited cell borrows the decision of the
nearest visited one; a visited cell takes step-time floors and ruled-out arms from the nearest
smaller visited batch bucket (see `Neighbourhood` for why those hold).
"""

from __future__ import annotations

from collections.abc import Mapping

from adaptivespec.controller.arm_prices import CostFloor
from adaptivespec.controller.arms import Arm
from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS
from adaptivespec.controller.cell import Cell, Neighbourhood
from adaptivespec.controller.step_costs import relative_cost_floor

CellKey = tuple[int, int]  # (context bucket, batch bucket)
Cells = Mapping[CellKey, Cell]


def nearest_decision(cells: Cells, key: CellKey) -> Arm | None:
    """The decision of the nearest visited cell: same context first (nearest batch), then the
    nearest context with a visited cell at the nearest batch; None when nothing was visited."""
    ctx, batch = key
    for ctx_distance in range(len(CONTEXT_BUCKETS)):
        for c in _around(ctx, ctx_distance, len(CONTEXT_BUCKETS)):
            for distance in range(len(BATCH_BUCKETS)):
                for b in _around(batch, distance, len(BATCH_BUCKETS)):
                    cell = cells.get((c, b))
                    if cell is not None and cell.informed and (c, b) != key:
                        return cell.decided
    return None


def _around(centre: int, distance: int, size: int) -> tuple[int, ...]:
    both = (centre - distance, centre + distance) if distance else (centre,)
    return tuple(i for i in both if 0 <= i < size)


def neighbourhood(cells: Cells, key: CellKey) -> Neighbourhood:
    """What the nearest smaller visited batch bucket implies for this cell."""
    smaller = smaller_neighbour(cells, key)
    if smaller is None:
        return Neighbourhood()
    return Neighbourhood(cost_floor(cells, key, smaller), cells[smaller].ruled_out)


def smaller_neighbour(cells: Cells, key: CellKey) -> CellKey | None:
    """The nearest smaller visited batch bucket, batch 1 excepted.

    A batch-1 plain step takes other kernels (GEMV, not GEMM), so batch 1 says nothing about
    how cost grows with K at larger batches.
    """
    ctx, batch = key
    for smaller in range(batch - 1, 0, -1):
        cell = cells.get((ctx, smaller))
        if cell is not None and cell.informed:
            return ctx, smaller
    return None


def cost_floor(cells: Cells, key: CellKey, smaller: CellKey) -> CostFloor:
    """Step-time floors for this cell's unmeasured arms, from the smaller bucket's step times.

    One hop only: what lies further down already reached that bucket through its own
    pruning (`ruled_out`), and walking the whole chain on every re-prune cost 50 us a step.
    """
    return relative_cost_floor(cells[key].times(), cells[smaller].times())
