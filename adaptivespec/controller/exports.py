"""A learned K table in the config formats of the engines operators already run.

- vLLM `num_speculative_tokens_per_batch_size` (PR #32374): `[start_bs, end_bs, K]`, inclusive,
  from 1, no overlap, 0 <= K <= `num_speculative_tokens`; past the last range, the last K.
  The five-item form `[bs_lo, bs_hi, ctx_lo, ctx_hi, K]` is the context axis proposed in vLLM
  PR #48944 (not merged).
- TensorRT-LLM `draft_len_schedule` (PR #10860): batch-size upper bound -> K; sizes above the
  largest key run K = 0. Its validator also wants key 1 present and equal to `max_draft_len`,
  and every K <= `max_draft_len`.
- SGLang `--speculative-adaptive-config`: `candidate_steps` that it chooses among from an EMA
  of the accept length. It has no batch-size axis and no "off", so only the set of K survives.

Adjacent buckets with the same K merge into one range; a bucket that was never visited takes
the K of the visited bucket below it (vLLM's own rule for gaps), so ranges are contiguous.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS, Bucket
from adaptivespec.errors import AdaptiveSpecError

FORMATS = ("vllm", "trtllm", "sglang")


class ExportError(AdaptiveSpecError):
    """The table cannot be written in the asked format."""


@dataclass(frozen=True, slots=True)
class KRange:
    lo: int  # batch size, inclusive
    hi: int  # inclusive
    k: int


@dataclass(frozen=True, slots=True)
class KTable:
    """One context bucket's K per batch range, merged and contiguous from batch size 1."""

    ctx: Bucket
    ranges: tuple[KRange, ...]

    @classmethod
    def from_labels(cls, ctx: Bucket, k_by_bucket: Mapping[str, int]) -> KTable:
        by_label = {b.label: b for b in BATCH_BUCKETS}
        unknown = sorted(set(k_by_bucket) - by_label.keys())
        if unknown:
            raise ExportError(f"unknown batch buckets {unknown}; known: {', '.join(by_label)}")
        if not k_by_bucket:
            raise ExportError("the table is empty: nothing was learned for this key yet")
        visited = sorted(((by_label[label], k) for label, k in k_by_bucket.items()), key=lambda v: v[0].lo)
        ranges: list[KRange] = []
        for index, (bucket, k) in enumerate(visited):
            lo = 1 if index == 0 else bucket.lo
            hi = visited[index + 1][0].lo - 1 if index + 1 < len(visited) else bucket.hi
            if ranges and ranges[-1].k == k:
                ranges[-1] = KRange(ranges[-1].lo, hi, k)
            else:
                ranges.append(KRange(lo, hi, k))
        return cls(ctx, tuple(ranges))

    @property
    def max_k(self) -> int:
        return max(r.k for r in self.ranges)


def vllm(table: KTable) -> dict[str, object]:
    """Paste into `--speculative-config` (beside "method" and "model")."""
    return {
        "num_speculative_tokens": max(1, table.max_k),
        "num_speculative_tokens_per_batch_size": [[r.lo, r.hi, r.k] for r in table.ranges],
    }


def vllm_with_context(tables: Sequence[KTable]) -> dict[str, object]:
    """The five-item form, one block of ranges per context bucket (vLLM PR #48944, not merged)."""
    entries = [
        [r.lo, r.hi, t.ctx.lo, t.ctx.hi, r.k]
        for t in sorted(tables, key=lambda t: t.ctx.lo)
        for r in t.ranges
    ]
    return {
        "num_speculative_tokens": max(1, *(t.max_k for t in tables)),
        "num_speculative_tokens_per_batch_size": entries,
    }


def trtllm(table: KTable) -> tuple[dict[str, object], list[str]]:
    """The schedule, and what had to change for TensorRT-LLM's validator (empty when nothing did)."""
    if table.max_k == 0:
        raise ExportError(
            "speculation never paid in this table (K = 0 at every batch size): run TensorRT-LLM "
            "without a speculative config rather than with an all-zero schedule"
        )
    ranges = list(table.ranges)
    while ranges and ranges[-1].k == 0:  # above the largest key TensorRT-LLM runs K = 0 already
        ranges.pop()
    schedule = {r.hi: r.k for r in ranges}
    notes = []
    first = ranges[0]
    if first.k != table.max_k:
        notes.append(
            f"TensorRT-LLM requires batch size 1 to run max_draft_len; the learned K for batch "
            f"{first.lo}-{first.hi} is {first.k}, exported as {table.max_k} for batch size 1 only"
        )
    schedule[1] = table.max_k
    ordered = {str(bound): schedule[bound] for bound in sorted(schedule)}
    return {"max_draft_len": table.max_k, "draft_len_schedule": ordered}, notes


def sglang(table: KTable) -> tuple[dict[str, object], list[str]]:
    """Candidate steps for SGLang's adaptive mode, and what SGLang cannot express."""
    steps = sorted({r.k for r in table.ranges if r.k > 0})
    if not steps:
        raise ExportError("speculation never paid in this table: run SGLang without speculation")
    notes = ["SGLang picks among candidate_steps by acceptance, not by batch size: the batch ranges are lost"]
    if any(r.k == 0 for r in table.ranges):
        off = ", ".join(f"{r.lo}-{r.hi}" for r in table.ranges if r.k == 0)
        notes.append(f"SGLang cannot turn speculation off at runtime; the table has K = 0 at batch {off}")
    return {"speculative_num_steps": max(steps), "adaptive_config": {"candidate_steps": steps}}, notes


def check_vllm(entries: Sequence[Sequence[int]], num_speculative_tokens: int) -> None:
    """vLLM's documented rules for the three-item form; raises ExportError naming the broken one."""
    previous_hi = 0
    for index, entry in enumerate(entries):
        if len(entry) != 3:
            raise ExportError(f"entry {index} {list(entry)} is not [start_bs, end_bs, K]")
        lo, hi, k = entry
        if index == 0 and lo != 1:
            raise ExportError(f"the first range must start at batch size 1, not {lo}")
        if lo > hi:
            raise ExportError(f"entry {index}: start {lo} > end {hi}")
        if lo <= previous_hi:
            raise ExportError(f"entry {index} [{lo}, {hi}] overlaps the previous range")
        if not 0 <= k <= num_speculative_tokens:
            raise ExportError(
                f"entry {index}: K = {k} outside [0, num_speculative_tokens = {num_speculative_tokens}]"
            )
        previous_hi = hi


def context_bucket_named(label: str) -> Bucket:
    for bucket in CONTEXT_BUCKETS:
        if bucket.label == label:
            return bucket
    raise ExportError(
        f"unknown context bucket {label!r}; known: {', '.join(b.label for b in CONTEXT_BUCKETS)}"
    )
