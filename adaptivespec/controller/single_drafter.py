"""Which one drafter an exported table runs, where the learned one mixes drafters.

vLLM, TensorRT-LLM and SGLang each run one speculative method, while the controller chooses a
drafter per cell. The export keeps the drafter whose best arms carry the most goodput over the
learned cells, runs it alone (in a cell that chose another drafter, at its own best K there, or
off where it was never measured there), and says what it dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adaptivespec.controller.buckets import Bucket

Option = tuple[int, float]  # a drafter's best K in one cell, and that arm's goodput (tokens/s)


def method_options(rewards: Mapping[tuple[str, int], float], batch: Bucket) -> dict[str, Option]:
    """Per drafter measured in one cell, its best arm there: `rewards` are tokens per row per
    second per (method, K), speculation off as ("", 0), which any drafter may fall back to.
    Goodput is at the bucket's middle batch size."""
    off = rewards.get(("", 0))
    rows = (batch.lo + batch.hi) / 2
    options: dict[str, Option] = {}
    for method in sorted({m for m, k in rewards if k > 0}):
        arms = [(k, r) for (m, k), r in rewards.items() if m == method and k > 0]
        if off is not None:
            arms.append((0, off))
        k, reward = max(arms, key=lambda arm: arm[1])
        options[method] = (k, reward * rows)
    return options


@dataclass(frozen=True, slots=True)
class LearnedRow:
    """One context bucket's decisions, what an export starts from."""

    k_by_bucket: Mapping[str, int]
    method_by_bucket: Mapping[str, str]  # "" where the decision is K = 0
    options: Mapping[str, Mapping[str, Option]]  # batch label -> drafter -> its best arm there


def one_drafter(rows: Sequence[LearnedRow]) -> tuple[str | None, list[dict[str, int]], list[str]]:
    """The drafter to export, each row's K table running it alone, and what was dropped.

    With one drafter (or none) the tables are the learned ones. With several, the drafter whose
    best arms sum to the most goodput over the learned cells is kept; a cell that chose another
    one runs the kept drafter's own best K there, or off where it was never measured there."""
    methods = sorted({m for row in rows for m in row.method_by_bucket.values() if m})
    if len(methods) <= 1:
        return (methods[0] if methods else None), [dict(row.k_by_bucket) for row in rows], []
    totals = {
        m: sum(options[m][1] for row in rows for options in row.options.values() if m in options)
        for m in methods
    }
    chosen = max(methods, key=totals.__getitem__)
    tables, dropped = [], []
    for row in rows:
        table = {}
        for label, k in row.k_by_bucket.items():
            method = row.method_by_bucket.get(label, "")
            if method in ("", chosen):
                table[label] = k
                continue
            table[label] = row.options.get(label, {}).get(chosen, (0, 0.0))[0]
            dropped.append(f"batch {label} chose {method} K={k} (runs {chosen} K={table[label]})")
        tables.append(table)
    others = ", ".join(f"{m} {totals[m]:.0f}" for m in methods if m != chosen)
    note = (
        f"the learned table mixes drafters, and an engine runs one: exported {chosen}, whose best "
        f"arms carry {totals[chosen]:.0f} tok/s over the learned cells (against {others}); "
        f"dropped: {'; '.join(dropped)}"
    )
    return chosen, tables, [note]
