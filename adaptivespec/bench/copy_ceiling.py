"""`adaptivespec bench copy-ceiling`: what drafters that copy from text can keep, alone and at
their best together.

Greedy output depends on the target only, never on the drafts. So once each request's greedy
output is known (one plain decode), a model-free drafter's tokens per verify step can be
replayed without the target: at each step the drafter sees the committed text, as the engine
shows it, its draft is kept up to the first token that differs from the output, and the step
yields that plus one. The same replay scores, step by step, the best of several drafters'
drafts: what a chooser that always knew which draft would be kept reaches by always taking the
longest (not a strict bound over every sequence of choices, but where choosing among those
drafters, per step or per cell, tops out).

The replay follows `bench drafters`' batch-1 decode step for step (tested against it), in
seconds instead of minutes, so it also serves to sweep a drafter's settings.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from adaptivespec.bench.arguments import positive_integers
from adaptivespec.bench.drafters import (
    add_requests_and_drafters,
    batch_one_config,
    chosen_drafters,
    decode_all,
    ngram_settings,
)
from adaptivespec.bench.machine import machine
from adaptivespec.bench.sibling_runners import MODEL_FREE, model_free_proposer, sibling
from adaptivespec.bench.traffic_mixes import prompts
from adaptivespec.config import EngineConfig
from adaptivespec.engine.copy_proposer import CopyProposer
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.proposers import NgramProposer
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.suffix_proposer import SuffixProposer
from adaptivespec.engine.verification import kept_prefix

Copying = NgramProposer | SuffixProposer | CopyProposer
BEST = "best"  # the contender that takes, at each step, whichever drafter's draft keeps most


@dataclass(frozen=True, slots=True)
class Decoded:
    """One request's greedy decode: its prompt, what it kept, and how far the target went."""

    prompt: tuple[int, ...]
    output: tuple[int, ...]  # the tokens counted (up to max_tokens, ended at an EOS), the first one included
    written: tuple[int, ...]  # the target's greedy tokens past `output` too (a last step may draft into them)


def replay(
    requests: Sequence[Decoded], drafters: dict[str, Callable[[], Copying]], k: int
) -> dict[str, float]:
    """Tokens per verify step of each drafter alone, and of the best of them at each step."""
    return {name: replay_steps(requests, [make], k)[0] for name, make in drafters.items()} | {
        BEST: replay_steps(requests, list(drafters.values()), k)[0]
    }


def replay_steps(
    requests: Sequence[Decoded], makers: list[Callable[[], Copying]], k: int
) -> tuple[float, float]:
    """Tokens per verify step, and drafts verified per step (what a verify that feeds each row
    its own drafts pays for), of the drafters' best draft at each step."""
    proposers = [make() for make in makers]  # fresh, as each contender's runner in `bench drafters`
    width = max(len(r.prompt) + len(r.written) for r in requests) + k + 1
    rows = RowState.allocate(1, width, torch.device("cpu"))
    only = np.arange(1)
    tokens = steps = drafted = 0
    for request in requests:
        prompt = list(request.prompt)
        # A row takes the next request as the runner's prefill has it: the drafters see the row's
        # last request whole, then the new prompt.
        for proposer in proposers:
            proposer.retire_rows(rows, [0])
        rows.write_prompt(0, prompt + list(request.written))
        for proposer in proposers:
            proposer.prefill(0, [prompt], [0])
        # What the target writes at each position; -1 past what the decode wrote, so no draft is kept there.
        target = np.full(len(request.written) + k + 1, -1, dtype=np.int64)
        target[: len(request.written)] = request.written
        made = 1  # the prefill's token
        while made < len(request.output):
            rows.set_lens(0, [len(prompt) + made])
            chosen = target[None, made : made + k + 1]  # [1, K + 1], as a greedy verify chooses
            drafts = [proposer.draft_rows(rows, only, k) for proposer in proposers]
            kept, count = max((int(kept_prefix(chosen, *d)[0]), int(d[1][0])) for d in drafts)
            made += kept + 1
            drafted += count
            steps += 1
        rows.set_lens(0, [len(prompt) + min(made, len(request.written))])
        tokens += len(request.output) - 1
    return tokens / max(steps, 1), drafted / max(steps, 1)


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = kinds.add_parser(
        "copy-ceiling",
        help="tokens per verify step of model-free drafters, alone and at their per-step best, replayed "
        "over the target's greedy outputs",
    )
    add_requests_and_drafters(bench, MODEL_FREE, max_tokens=128)
    bench.add_argument(
        "--k", type=positive_integers, default="4,8,16", help="draft tokens per step, comma-separated"
    )


def run(args: argparse.Namespace) -> None:
    names = chosen_drafters(args, MODEL_FREE)
    ks: list[int] = args.k
    config = batch_one_config(args, ks)
    models = config.models
    loaded = load_runner(config)
    requests = prompts(args.traffic, loaded.tokenizer, args.requests, args.seed)
    print(f"decoding {len(requests)} requests greedily (the replay's text)", flush=True)
    decoded = decode_requests(
        lambda: sibling(loaded.runner, None, config), requests, args.max_tokens, max(ks)
    )
    drafters = {name: _maker(name, config) for name in names}
    figures = {k: replay(decoded, drafters, k) for k in ks}
    result = {
        "machine": machine(loaded.runner.hardware_key),
        "scenario": {
            "traffic": args.traffic,
            "target": args.target,
            "requests": len(requests),
            "max_tokens": args.max_tokens,
            "seed": args.seed,
            "ngram": ngram_settings(models),
            "suffix": {
                "spec_factor": models.suffix.max_spec_factor,
                "min_prob": models.suffix.min_token_prob,
                "max_depth": models.suffix.max_tree_depth,
            },
        },
        "tokens_per_step": {str(k): figures[k] for k in ks},
        "best_over_each": {str(k): {n: figures[k][BEST] / figures[k][n] for n in names} for k in ks},
    }
    print(f"\n{args.traffic}, {len(requests)} requests, batch 1, greedy: tokens per verify step (off: 1)")
    print(f"{'K':>4}" + "".join(f"{n:>14}" for n in [*names, BEST]))
    for k in ks:
        print(f"{k:>4}" + "".join(f"{figures[k][n]:>14.2f}" for n in [*names, BEST]))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


def decode_requests(
    fresh_runner: Callable[[], HFRunner], requests: list[list[int]], max_tokens: int, k: int
) -> list[Decoded]:
    """Each request decoded greedily at K = 0, `k` tokens past max_tokens (what a last step at K may
    have drafted into), the counted output cut as `bench drafters` cuts it."""
    runner = fresh_runner()
    try:
        run = decode_all(runner, requests, 0, max_tokens + k)
    finally:
        runner.close()
    eos = set(runner.eos_token_ids)
    out = []
    for prompt, written in zip(requests, run.outputs, strict=True):
        stop = next((i + 1 for i, t in enumerate(written) if t in eos), len(written))
        out.append(Decoded(tuple(prompt), tuple(written[: min(stop, max_tokens)]), tuple(written)))
    return out


def _maker(name: str, config: EngineConfig) -> Callable[[], Copying]:
    def make() -> Copying:
        proposer = model_free_proposer(name, config)
        if not isinstance(proposer, NgramProposer | SuffixProposer | CopyProposer):
            raise SystemExit(f"{name} does not draft from text: choose among {MODEL_FREE}")
        return proposer

    return make
