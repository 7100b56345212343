"""`adaptivespec bench drafters`: what each drafter keeps per verify step, and its decode speed.

At batch 1, greedy, every request of a traffic mix (traffic_mixes.py) is decoded by each
contender in turn: `off` (K = 0), then each drafter at K. Contenders alternate within each
round, in an order that rotates from round to round, so drift between minutes falls on all
alike; each round starts fresh drafters, so that a suffix tree's global cache holds only
that round's earlier requests, never the same request's output from an earlier round. Every
contender's tokens must equal `off`'s. `suffix-local` is suffix without the global tree
(max_cached_requests = 0): the global tree's own gain.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from adaptivespec.bench.arguments import positive_integers
from adaptivespec.bench.machine import machine
from adaptivespec.bench.sibling_runners import MODEL_FREE, model_free_proposer, sibling
from adaptivespec.bench.traffic_mixes import MIXES, prompts
from adaptivespec.config import EngineConfig, ModelConfig, SuffixSettings
from adaptivespec.engine.eagle3_head import Eagle3Head
from adaptivespec.engine.eagle3_proposer import Eagle3Proposer, load_head
from adaptivespec.engine.head_cache import cached_head
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.openvino_export import exported_model
from adaptivespec.engine.openvino_target import OpenVINOTarget
from adaptivespec.engine.proposers import Proposer
from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.suffix_proposer import suffix_available

GREEDY = SamplingParams(max_tokens=1 << 20, temperature=0.0)
DRAFTERS = (*MODEL_FREE, "eagle3")
# "off+D": drafter D loaded, every step at K = 0: what a loaded drafter costs a plain step.
CONTENDERS = DRAFTERS + tuple(f"off+{d}" for d in DRAFTERS)


@dataclass(frozen=True, slots=True)
class Run:
    """One contender over every request of one round."""

    tokens: int  # generated after each request's first token
    steps: int  # decode steps (verify passes)
    seconds: float  # decode steps' time
    outputs: tuple[tuple[int, ...], ...]

    @property
    def per_step(self) -> float:
        return self.tokens / self.steps

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = kinds.add_parser(
        "drafters", help="tokens per verify step and decode speed of each drafter, batch 1"
    )
    add_requests_and_drafters(bench, CONTENDERS, max_tokens=192)
    bench.add_argument(
        "--k",
        type=positive_integers,
        default="8",
        help="draft tokens per step; several, comma-separated, run each drafter at each",
    )
    bench.add_argument(
        "--head",
        default=None,
        help="eagle3's head directory (default: the one train-draft cached for the target)",
    )
    bench.add_argument("--rounds", type=int, default=3)
    bench.add_argument(
        "--runtime",
        choices=("torch", "openvino"),
        default="torch",
        help="what runs the target's forwards (openvino: the model converted once, as serve runs it)",
    )


def add_requests_and_drafters(
    bench: argparse.ArgumentParser, drafters: Sequence[str], max_tokens: int
) -> None:
    """Which requests (a traffic mix's, by seed), which drafters, and the model-free drafters'
    settings as the daemon's config names them."""
    bench.add_argument("--traffic", choices=MIXES, default="code-edit")
    bench.add_argument("--target", default="smollm2-135m-instruct")
    bench.add_argument("--drafters", default="ngram,suffix", help=f"comma-separated, of {drafters}")
    bench.add_argument("--requests", type=int, default=8)
    bench.add_argument("--max-tokens", type=int, default=max_tokens)
    bench.add_argument("--seed", type=int, default=0, help="which prompts (other seeds: other prompts)")
    bench.add_argument("--json", type=Path, default=None)
    bench.add_argument(
        "--ngram-min", type=int, default=ModelConfig().ngram_min, help="prompt lookup's shortest match"
    )
    bench.add_argument(
        "--ngram-unigram-drafts",
        type=int,
        default=ModelConfig().ngram_unigram_drafts,
        help="prompt lookup's drafts from a 1-gram match, at most (K or more: K, as vLLM drafts)",
    )
    defaults = SuffixSettings()
    bench.add_argument("--suffix-spec-factor", type=float, default=defaults.max_spec_factor)
    bench.add_argument("--suffix-min-prob", type=float, default=defaults.min_token_prob)


def ngram_settings(models: ModelConfig) -> dict[str, int]:
    """Prompt lookup's settings as the drafter benches record them."""
    return {"min": models.ngram_min, "max": models.ngram_max, "unigram_drafts": models.ngram_unigram_drafts}


def chosen_drafters(args: argparse.Namespace, allowed: Sequence[str]) -> list[str]:
    """`--drafters`, checked: each one known, and suffix's trees installed where it is named."""
    drafters = [d for d in args.drafters.split(",") if d]
    unknown = sorted(set(drafters) - set(allowed))
    if unknown or not drafters:
        raise SystemExit(f"--drafters {args.drafters!r}: name one or more of {', '.join(allowed)}")
    if any("suffix" in d or "copy" in d for d in drafters) and not suffix_available():
        raise SystemExit("suffix and copy need arctic-inference: run ops/install-suffix.sh")
    return drafters


def batch_one_config(args: argparse.Namespace, ks: list[int]) -> EngineConfig:
    """One row on the torch runtime's own steps, the drafters set as the flags say, room for
    the largest K."""
    models = ModelConfig(
        target=args.target,
        proposer="ngram",
        device="cpu",
        dtype="float32",
        ngram_min=args.ngram_min,
        ngram_unigram_drafts=args.ngram_unigram_drafts,
        suffix_spec_factor=args.suffix_spec_factor,
        suffix_min_prob=args.suffix_min_prob,
        runtime="torch",
    )
    return EngineConfig(
        max_batch=1, max_context=2048, max_spec_tokens=max(ks), threads=args.threads, models=models
    )


def run(args: argparse.Namespace) -> None:
    drafters = chosen_drafters(args, CONTENDERS)
    ks: list[int] = args.k
    config = batch_one_config(args, ks)
    models = config.models
    loaded = load_runner(config)
    head_dir = _head_dir(args.head, loaded) if any("eagle3" in d for d in drafters) else None
    head = None if head_dir is None else load_head(head_dir, loaded.runner.target.model, linear="packed")
    ir = None
    if args.runtime == "openvino":
        ir = exported_model(loaded.target.path, loaded.target.key, loaded.runner.target.model.config)
    requests = prompts(args.traffic, loaded.tokenizer, args.requests, args.seed)
    longest = max(len(p) for p in requests) + args.max_tokens + max(ks) + 1
    if longest > config.max_context:
        raise SystemExit(f"a request needs {longest} positions; lower --max-tokens or --requests")
    plan = {"off": ("off", 0)} | {
        (d if len(ks) == 1 or d.startswith("off") else f"{d}@k{k}"): (d, 0 if d.startswith("off") else k)
        for d in drafters
        for k in ks
    }
    names = list(plan)
    runs: dict[str, list[Run]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            drafter, k = plan[name]
            runner = _runner(loaded, config, drafter, head, ir)
            try:
                runs[name].append(decode_all(runner, requests, k, args.max_tokens))
            finally:
                runner.close()
            print(
                f"round {round_ + 1}/{args.rounds} {name}: {runs[name][-1].per_step:.2f} tokens/step, "
                f"{runs[name][-1].tok_s:.1f} tok/s",
                flush=True,
            )
    result = {
        "machine": machine(loaded.runner.hardware_key),
        "scenario": {
            "traffic": args.traffic,
            "target": args.target,
            "k": ks[0] if len(ks) == 1 else ks,
            "head": None if head_dir is None else str(head_dir),
            "runtime": args.runtime,
            "requests": len(requests),
            "prompt_tokens": [min(len(p) for p in requests), max(len(p) for p in requests)],
            "max_tokens": args.max_tokens,
            "rounds": args.rounds,
            "seed": args.seed,
            "batch": 1,
            "ngram": ngram_settings(models),
            "suffix": asdict(models.suffix),
        },
        "contenders": [_summary(name, runs[name], runs["off"]) for name in names],
    }
    _print(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


def _head_dir(given: str | None, loaded: LoadedModels) -> str:
    path = given or cached_head(loaded.target.path)
    if path is None:
        raise SystemExit("no EAGLE-3 head for this target: pass --head DIR, or build one with train-draft")
    return str(path)


def _runner(
    loaded: LoadedModels, config: EngineConfig, name: str, head: Eagle3Head | None, ir: Path | None
) -> HFRunner:
    """A fresh runner on the loaded target's weights, with this contender's drafter; where `ir`
    is given, OpenVINO runs the target's forwards from it, on a cache of the runner's own."""
    base = loaded.runner
    drafter = name.removeprefix("off+")
    proposer: Proposer | None
    if drafter == "eagle3" and head is not None:
        proposer = Eagle3Proposer(
            head, base.target.model, "eagle3", max_batch=1, cache_len=base.cache_len, clock=base.clock
        )
    else:
        proposer = model_free_proposer(drafter, config)
    passes = None
    if ir is not None:
        tap = proposer.tap if isinstance(proposer, Eagle3Proposer) else None
        passes = OpenVINOTarget(
            base.target.model,
            ir,
            rows=1,
            cache_len=base.cache_len,
            clock=base.clock,
            threads=config.threads,
            tap=tap,
        )
    return sibling(base, proposer, config, passes)


@torch.inference_mode()
def decode_all(runner: HFRunner, requests: list[list[int]], k: int, max_tokens: int) -> Run:
    tokens = steps = 0
    seconds = 0.0
    outputs = []
    for prompt in requests:
        first = runner.prefill(0, [PrefillItem(prompt, GREEDY, seed=0)]).first_tokens[0]
        assert first is not None
        output, ended = [first], first in runner.eos_token_ids
        while len(output) < max_tokens and not ended:
            out = runner.decode(1, k)
            output += out.tokens[0]
            ended = any(t in runner.eos_token_ids for t in out.tokens[0])
            steps += 1
            seconds += out.step_seconds
        stop = next((i + 1 for i, t in enumerate(output) if t in runner.eos_token_ids), len(output))
        output = output[: min(stop, max_tokens)]
        tokens += len(output) - 1
        outputs.append(tuple(output))
    return Run(tokens, steps, seconds, tuple(outputs))


def _summary(name: str, runs: list[Run], off: list[Run]) -> dict[str, Any]:
    median = statistics.median
    speedups = [r.tok_s / o.tok_s for r, o in zip(runs, off, strict=True)]
    return {
        "name": name,
        "tokens_per_step": median(r.per_step for r in runs),
        "tok_s": median(r.tok_s for r in runs),
        "step_ms": median(1e3 * r.seconds / r.steps for r in runs),
        "step_ratio_to_off": median(
            (r.seconds / r.steps) / (o.seconds / o.steps) for r, o in zip(runs, off, strict=True)
        ),
        "tok_s_range": [min(r.tok_s for r in runs), max(r.tok_s for r in runs)],
        "speedup_over_off": median(speedups),
        "speedup_range": [min(speedups), max(speedups)],
        "identical_to_off": all(r.outputs == o.outputs for r, o in zip(runs, off, strict=True)),
        "tokens": runs[0].tokens,
        "steps": [r.steps for r in runs],
    }


def _print(result: dict[str, Any]) -> None:
    scenario = result["scenario"]
    print(
        f"\n{scenario['traffic']}, batch 1, K = {scenario['k']}, {scenario['requests']} requests, "
        f"{scenario['rounds']} rounds (medians, [range])"
    )
    header = f"{'contender':<14}{'tokens/step':>12}{'step ms':>9}{'tok/s':>10}{'x off':>8}  {'range':<14}"
    print(header + "same as off")
    for c in result["contenders"]:
        span = f"[{c['speedup_range'][0]:.2f}, {c['speedup_range'][1]:.2f}]"
        print(
            f"{c['name']:<14}{c['tokens_per_step']:>12.2f}{c['step_ms']:>9.1f}{c['tok_s']:>10.1f}"
            f"{c['speedup_over_off']:>8.2f}  "
            f"{span:<14}{c['identical_to_off']}"
        )
