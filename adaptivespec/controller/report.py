"""What operators read of the cells: each informed cell's decision and how sure it is, the
crossover batch size per context bucket, and what exploration spent."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from adaptivespec.controller.acceptance import Acceptance
from adaptivespec.controller.buckets import BATCH_BUCKETS, crossover
from adaptivespec.controller.cell import Cell
from adaptivespec.controller.cell_table import CellKey


@dataclass(frozen=True, slots=True)
class CellDecision:
    ctx_bucket: int
    batch_bucket: int
    k: int
    samples: int  # steps this host measured
    confidence: float
    fleet_samples: int = 0  # steps other hosts measured (and this host before its restart)
    hosts: int = 1  # hosts whose steps stand behind the decision
    method: str = ""  # the drafter at k ("" at K = 0)


def decisions(
    cells: Mapping[CellKey, Cell], acceptance_of: Callable[[int], Acceptance]
) -> list[CellDecision]:
    """The informed cells' decisions (measured here, restored from the store, or from the
    fleet), with how sure each is."""
    out = []
    for (ctx, batch), cell in sorted(cells.items()):
        if not cell.informed:
            continue
        evidence = cell.evidence
        hosts = (1 if evidence.samples else 0) + evidence.fleet_hosts
        confidence = cell.confidence(acceptance_of(ctx))
        decided = cell.decided
        out.append(
            CellDecision(
                ctx,
                batch,
                decided.k,
                evidence.samples,
                confidence,
                evidence.pooled_steps,
                hosts,
                decided.method,
            )
        )
    return out


def thresholds(decided: list[CellDecision]) -> dict[int, int | None]:
    """Per context bucket: smallest batch size from which every larger visited bucket decides K=0."""
    per_ctx: dict[int, list[tuple[int, int]]] = {}
    for d in decided:
        per_ctx.setdefault(d.ctx_bucket, []).append((d.batch_bucket, d.k))
    return {ctx: crossover([(BATCH_BUCKETS[b], k) for b, k in sorted(rows)]) for ctx, rows in per_ctx.items()}


def exploration(cells: Mapping[CellKey, Cell]) -> dict[str, float]:
    """How many steps went to arms the measurements already showed to be worse than the decision."""
    pulls = sum(c.pulls for c in cells.values())
    dominated = sum(c.dominated_pulls for c in cells.values())
    return {
        "steps": float(pulls),
        "dominated_steps": float(dominated),
        "dominated_share": dominated / max(pulls, 1),
    }
