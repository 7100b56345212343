"""Step-level microbenchmarks of the hf runner: step time against batch and K, our slot
KV cache against transformers' DynamicCache, and the draft's acceptance on held-out text."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=1, temperature=0.0)


@dataclass(frozen=True, slots=True)
class StepTiming:
    batch: int
    k: int
    context: int
    median_ms: float
    tokens_per_step: float  # emitted per row per step

    @property
    def tok_s(self) -> float:
        return self.batch * self.tokens_per_step / (self.median_ms / 1000)


@dataclass(frozen=True, slots=True)
class CacheComparison:
    batch: int
    context: int
    ours_ms: float
    dynamic_cache_ms: float

    @property
    def ratio(self) -> float:
        return self.dynamic_cache_ms / self.ours_ms


def prompt_windows(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], count: int, length: int
) -> list[list[int]]:
    """`count` windows of exactly `length` tokens of real text, cycling through the documents."""
    ids = tokenizer.encode("\n".join(texts), add_special_tokens=False)
    if len(ids) < length + 1:
        raise ValueError(f"need at least {length + 1} tokens of text, got {len(ids)}")
    stride = max(1, (len(ids) - length) // max(1, count))
    return [ids[(i * stride) % (len(ids) - length) :][:length] for i in range(count)]


def step_times(runner: HFRunner, prompts: list[list[int]], ks: list[int], steps: int) -> list[StepTiming]:
    """Median decode-step time for every K at batch len(prompts); each K starts from a fresh prefill."""
    results = []
    for k in ks:
        prefill_rows(runner, prompts)
        runner.decode(len(prompts), k)  # warm-up
        times, emitted = [], 0
        for _ in range(steps):
            out = runner.decode(len(prompts), k)
            times.append(out.step_seconds)
            emitted += sum(len(t) for t in out.tokens)
        results.append(
            StepTiming(
                len(prompts),
                k,
                len(prompts[0]),
                statistics.median(times) * 1000,
                emitted / steps / len(prompts),
            )
        )
    return results


def compare_with_dynamic_cache(runner: HFRunner, prompts: list[list[int]], steps: int) -> CacheComparison:
    """One plain decode step at a fixed context: our slot cache against DynamicCache, interleaved."""
    batch, context = len(prompts), len(prompts[0])
    ids = torch.tensor(prompts, device=runner.device)
    if runner.cached is None:
        raise ValueError("the cache comparison runs the torch runtime's slot cache")
    model, kwarg = runner.cached.model, runner.cached.cache_kwarg
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :-1], use_cache=True, **{kwarg: cache})
        prefill_rows(runner, [p[:-1] for p in prompts])
        ours, theirs = [], []
        for _ in range(steps + 1):
            began = time.perf_counter()
            model(input_ids=ids[:, -1:], use_cache=True, **{kwarg: cache})
            theirs.append(time.perf_counter() - began)
            cache.crop(-1)
            ours.append(runner.decode(batch, 0).step_seconds)
            runner.rows.rewind(batch, 1)  # stay at the same context, like the cropped baseline
    return CacheComparison(
        batch, context, statistics.median(ours[1:]) * 1000, statistics.median(theirs[1:]) * 1000
    )


def prefill_rows(runner: HFRunner, prompts: list[list[int]]) -> None:
    """Greedy prompts into rows [0, len(prompts)), 16 at a time."""
    for start in range(0, len(prompts), 16):
        chunk = prompts[start : start + 16]
        runner.prefill(start, [PrefillItem(p, GREEDY, 0) for p in chunk])


def acceptance_at_k1(runner: HFRunner, prompts: list[list[int]], steps: int) -> float:
    """Per-token greedy acceptance: how often the draft's argmax equals the target's, at K = 1."""
    prefill_rows(runner, prompts)
    drafted = accepted = 0
    for _ in range(steps):
        out = runner.decode(len(prompts), 1)
        drafted += sum(out.drafted)
        accepted += sum(out.accepted)
    return accepted / max(1, drafted)
