"""A learned K table in the config formats of the engines operators already run.

Where the rules come from:
- vLLM 0.33.0 (the newest release on PyPI): `vllm/v1/spec_decode/dynamic/utils.py` validates
  and expands the three-item schedule, and CI runs our exports through that very module
  (tests/controller/test_exports.py). Its `SpeculativeConfig` names the field
  `num_speculative_tokens_per_batch_size` and forbids unknown fields.
- vLLM main (shared/ANCHORS.md, 2026-12-02): the field is renamed `speculative_token_schedule`
  (the old name warns), and the five-item context form (PR #48944) is merged.
- SGLang 0.5.23: `sglang/srt/speculative/adaptive_spec_params.py` (`_load_adaptive_config`,
  `_find_closest_bs`), read from its wheel; it does not import without its GPU stack, so
  `check_sglang` restates its rules.

- vLLM `--speculative-config`: `method` with its own keys (`ngram`: `prompt_lookup_min/max`;
  `draft_model`: `model`), `num_speculative_tokens`, and the schedule, under main's name by
  default (`field` picks the release's). Three-item entries `[start_bs, end_bs, K]`,
  inclusive, from 1, no overlap, K >= 0 (vLLM clamps it to `num_speculative_tokens`); a gap
  and the tail carry the previous K. The five-item form `[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`
  needs the same batch ranges in every context bucket.
- TensorRT-LLM `draft_len_schedule` (PR #10860): batch-size upper bound -> K; sizes above the
  largest key run K = 0. Its validator also wants key 1 present and equal to `max_draft_len`,
  and every K <= `max_draft_len`.
- SGLang `--speculative-adaptive-config FILE`: integer-string keys, each the batch size a
  tier starts at (a batch, padded to a CUDA-graph size, takes the largest key at or below
  it), `{"1": {"candidate_steps": [...]}, "17": {...}}`; other keys are ignored; steps are
  integers >= 0 (0: off); it chooses among a tier's steps from an EMA of the accept length.

A learned table may mix drafters (the controller chooses per cell); each engine runs one, and
`single_drafter.py` picks which before a table gets here.

Adjacent buckets with the same K merge into one range; a bucket that was never visited takes
the K of the visited bucket below it (vLLM's own rule for gaps), so ranges are contiguous.
Above the last learned bucket every export runs the last learned K, as the controller itself
does (an unvisited bucket borrows its nearest measured neighbour); where a format cannot say
that, or anything else of the table, the export returns a note saying so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS, Bucket
from adaptivespec.errors import AdaptiveSpecError

FORMATS = ("vllm", "trtllm", "sglang")
# Prompt lookup's and copy's names (engine/proposers.py): min and max n, and "uN" where a 1-gram
# match drafts at most N tokens.
NGRAM_NAME = r"ngram([0-9]+)-([0-9]+)(?:u([0-9]+))?"
COPY_NAME = r"copy([0-9]+)-([0-9]+)(?:u([0-9]+))?"


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

    def k_at(self, batch: int) -> int:
        """The K this table runs at a batch size; past the last range, the last K."""
        return next((r.k for r in self.ranges if r.lo <= batch <= r.hi), self.ranges[-1].k)


def method_keys(model_key: str | None, method: str | None = None) -> tuple[dict[str, object], list[str]]:
    """vLLM's `method` and its keys for a drafter named in a model key (target+drafters:dtype,
    the drafters comma-separated); `method` picks one where the key names several."""
    proposers = _proposers(model_key)
    if method is not None:
        proposers = [p for p in proposers if _method_of(p) == method]
    proposer = proposers[0] if len(proposers) == 1 else None
    ngram = re.fullmatch(NGRAM_NAME, proposer or "")
    if ngram:
        low, high = int(ngram.group(1)), int(ngram.group(2))
        return {"method": "ngram", "prompt_lookup_min": low, "prompt_lookup_max": high}, _unigram_note(ngram)
    copy = re.fullmatch(COPY_NAME, proposer or "")
    if copy:
        low, high = int(copy.group(1)), int(copy.group(2))
        note = (
            "vLLM runs one copying drafter, not the longer of prompt lookup's and suffix "
            "decoding's draft per row as we do: this exports prompt lookup with our sizes "
            '(set "method": "suffix" instead where requests repeat each other, as agents\' do)'
        )
        keys = {"method": "ngram", "prompt_lookup_min": low, "prompt_lookup_max": high}
        return keys, [note, *_unigram_note(copy)]
    if proposer == "suffix":
        note = (
            "vLLM's suffix_decoding_* defaults are ours but for the cached requests (vLLM 10,000, "
            "ours 1,000); set them if you changed ours"
        )
        return {"method": "suffix"}, [note]
    if proposer and _method_of(proposer) == "eagle3":
        note = (
            f'the EAGLE-3 head is named {proposer!r} here: set "model" to its directory '
            "(train-draft prints it; vLLM loads the speculators format as is)"
        )
        return {"method": "eagle3", "model": proposer}, [note]
    if proposer:
        note = f'the draft model is named {proposer!r} here: set "model" to its path or hub id'
        return {"method": "draft_model", "model": proposer}, [note]
    return {}, ['the proposer is unknown: add "method" (and its keys) beside the schedule']


def _unigram_note(name: re.Match[str]) -> list[str]:
    if name.group(3) is None:
        return []
    return [
        f"our prompt lookup drafts at most {name.group(3)} tokens from a 1-gram match; vLLM's drafts "
        "K from any match, so its verify is wider there than the K learned here assumed"
    ]


def drafters_in(model_key: str | None) -> tuple[str, ...]:
    """The drafters (by method) a model key names, in its order; () when it names none."""
    return tuple(_method_of(p) for p in _proposers(model_key))


def _proposers(model_key: str | None) -> list[str]:
    named = model_key.split("+", 1)[1].rsplit(":", 1)[0] if model_key and "+" in model_key else ""
    return [p for p in named.split(",") if p]


def _method_of(proposer: str) -> str:
    """The drafter kind a model key's proposer name stands for (engine/proposers.py names them)."""
    if re.fullmatch(NGRAM_NAME, proposer):
        return "ngram"
    if re.fullmatch(COPY_NAME, proposer):
        return "copy"
    if proposer.startswith("eagle3-"):
        return "eagle3"
    return "suffix" if proposer == "suffix" else "draft"


MAIN_FIELD = "speculative_token_schedule"  # vLLM main
RELEASED_FIELD = "num_speculative_tokens_per_batch_size"  # vLLM 0.33.0, the newest release
VLLM_FIELDS = (MAIN_FIELD, RELEASED_FIELD)


def vllm(
    table: KTable, model_key: str | None = None, field: str = MAIN_FIELD, drafter: str | None = None
) -> tuple[dict[str, object], list[str]]:
    """The `--speculative-config` JSON, and what the operator must still fill in; `drafter`
    names the one the table runs, where the model key names several."""
    method, notes = method_keys(model_key, drafter)
    schedule = [[r.lo, r.hi, r.k] for r in table.ranges]
    check_vllm(schedule, max(1, table.max_k))
    if field == MAIN_FIELD:
        notes.append(
            f"{MAIN_FIELD} is vLLM main's name; vLLM 0.33.0 (the newest release) refuses it and "
            f"wants {RELEASED_FIELD}: export with --vllm-field {RELEASED_FIELD} for it"
        )
    top = max(1, table.max_k)
    return {**method, "num_speculative_tokens": top, field: schedule}, notes


def vllm_with_context(
    tables: Sequence[KTable], model_key: str | None = None, drafter: str | None = None
) -> tuple[dict[str, object], list[str]]:
    """The five-item form: one block per context bucket, every block over the same batch ranges
    (vLLM refuses blocks whose ranges differ), split where any bucket's K changes."""
    ordered = sorted(tables, key=lambda t: t.ctx.lo)
    bounds = sorted({r.hi for t in ordered for r in t.ranges})
    segments: list[tuple[int, int]] = []
    for lo, hi in zip([1, *(b + 1 for b in bounds[:-1])], bounds, strict=True):
        ks = [t.k_at(lo) for t in ordered]
        if segments and [t.k_at(segments[-1][0]) for t in ordered] == ks:
            segments[-1] = (segments[-1][0], hi)  # no bucket changes K here: one range
        else:
            segments.append((lo, hi))
    entries = [[lo, hi, t.ctx.lo, t.ctx.hi, t.k_at(lo)] for t in ordered for lo, hi in segments]
    method, notes = method_keys(model_key, drafter)
    notes.append("the context form needs vLLM main (PR #48944); vLLM 0.33.0 has no context axis")
    pairs = zip(ordered, ordered[1:], strict=False)
    gaps = [f"{a.ctx.hi + 1}-{b.ctx.lo - 1}" for a, b in pairs if b.ctx.lo > a.ctx.hi + 1]
    if gaps:
        notes.append(f"nothing was learned at context {', '.join(gaps)}: vLLM's rule for a gap applies")
    top = max(1, *(t.max_k for t in ordered))
    return {**method, "num_speculative_tokens": top, "speculative_token_schedule": entries}, notes


def trtllm(table: KTable) -> tuple[dict[str, object], list[str]]:
    """The schedule, and what had to change for TensorRT-LLM's validator (empty when nothing did)."""
    if table.max_k == 0:
        raise ExportError(
            "speculation never paid in this table (K = 0 at every batch size): run TensorRT-LLM "
            "without a speculative config rather than with an all-zero schedule"
        )
    ranges = list(table.ranges)
    notes = []
    if ranges[-1].k > 0 and ranges[-1].hi < BATCH_BUCKETS[-1].hi:
        # TensorRT-LLM runs K = 0 above its largest key; the table (and vLLM's export) runs
        # the last K there, so the last key is raised to the largest batch size we track.
        last = ranges[-1]
        ranges[-1] = KRange(last.lo, BATCH_BUCKETS[-1].hi, last.k)
        notes.append(
            f"nothing was learned above batch {last.hi}: K = {last.k} is kept up to batch "
            f"{BATCH_BUCKETS[-1].hi}, as the vLLM export and the controller do; TensorRT-LLM runs "
            "K = 0 beyond its largest key"
        )
    while ranges and ranges[-1].k == 0:  # above the largest key TensorRT-LLM runs K = 0 already
        ranges.pop()
    schedule = {r.hi: r.k for r in ranges}
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
    """The `--speculative-adaptive-config` file: one tier per batch range, keyed by the batch
    size it starts at, whose only candidate step is the learned K (0 where speculation is off)."""
    if table.max_k == 0:
        raise ExportError("speculation never paid in this table: run SGLang without speculation")
    config: dict[str, object] = {"strategy": "ema"}
    for r in table.ranges:
        config[str(r.lo)] = {"candidate_steps": [r.k]}
    notes = [
        f"launch SGLang with --speculative-num-steps {table.max_k} --speculative-adaptive-config FILE",
        "SGLang 0.5.23 adapts steps only for EAGLE and EAGLE3 drafts, with topk 1",
    ]
    return config, notes


def check_sglang(config: Mapping[str, object]) -> None:
    """SGLang's keyed form: batch-size keys from 1, each a tier with non-negative candidate steps."""
    tiers = {key: value for key, value in config.items() if key.isdigit()}  # SGLang skips the rest
    if not tiers:
        raise ExportError(f"SGLang's adaptive config is keyed by batch size; got keys {sorted(config)}")
    if "1" not in tiers:
        raise ExportError("SGLang's adaptive config needs a tier for batch size 1")
    for key, tier in tiers.items():
        steps = tier.get("candidate_steps") if isinstance(tier, Mapping) else None
        if not isinstance(steps, list) or not steps or any(not isinstance(s, int) or s < 0 for s in steps):
            raise ExportError(f"tier {key}: candidate_steps must be a non-empty list of integers >= 0")


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


def check_vllm_with_context(entries: Sequence[Sequence[int]], num_speculative_tokens: int) -> None:
    """The five-item form: each context block follows the three-item rules, every block has
    the same batch ranges, and context blocks do not overlap."""
    blocks: dict[tuple[int, int], list[list[int]]] = {}
    for index, entry in enumerate(entries):
        if len(entry) != 5:
            raise ExportError(f"entry {index} {list(entry)} is not [bs_lo, bs_hi, ctx_lo, ctx_hi, K]")
        lo, hi, ctx_lo, ctx_hi, k = entry
        if ctx_lo > ctx_hi:
            raise ExportError(f"entry {index}: context start {ctx_lo} > end {ctx_hi}")
        blocks.setdefault((ctx_lo, ctx_hi), []).append([lo, hi, k])
    for block in blocks.values():
        check_vllm(block, num_speculative_tokens)
    shapes = {tuple((lo, hi) for lo, hi, _ in block) for block in blocks.values()}
    if len(shapes) > 1:
        raise ExportError("every context bucket must have the same batch ranges")
    spans = sorted(blocks)
    for (_, a_hi), (b_lo, _) in zip(spans, spans[1:], strict=False):
        if b_lo <= a_hi:
            raise ExportError(f"context ranges overlap at {b_lo}")


def context_bucket_named(label: str) -> Bucket:
    for bucket in CONTEXT_BUCKETS:
        if bucket.label == label:
            return bucket
    raise ExportError(
        f"unknown context bucket {label!r}; known: {', '.join(b.label for b in CONTEXT_BUCKETS)}"
    )
