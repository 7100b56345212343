"""`adaptivespec generate`: prompts from the command line or a file, run as one continuous
batch at a fixed K, printed as text or JSON lines."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.errors import AdaptiveSpecError

if TYPE_CHECKING:
    from adaptivespec.engine.records import Completion


def _prompts(args: argparse.Namespace) -> list[str]:
    if args.prompt is not None:
        return [args.prompt]
    path: Path = args.prompts_file
    if not path.is_file():
        raise AdaptiveSpecError(f"prompts file {path} does not exist")
    prompts = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        raise AdaptiveSpecError(f"prompts file {path} holds no prompts (one per line)")
    return prompts


async def generate(args: argparse.Namespace) -> list[tuple[str, Completion]]:
    from adaptivespec.engine.engine import Engine, compute_thread
    from adaptivespec.engine.loader import load_runner
    from adaptivespec.engine.sampling import SamplingParams
    from adaptivespec.engine.static_policy import FixedK

    prompts = _prompts(args)
    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed
    )
    models = ModelConfig(
        target=args.target,
        draft=args.draft,
        proposer=args.proposer,
        device=args.device,
        dtype=args.dtype,
    )
    config = EngineConfig(
        max_batch=min(64, len(prompts)),
        max_queued=len(prompts),
        max_context=args.max_context,
        threads=args.threads,
        kv_cache_memory=args.kv_cache_memory,
        models=models,
    )
    compute = compute_thread()
    try:
        loaded = await asyncio.get_running_loop().run_in_executor(compute, load_runner, config)
        engine = Engine(loaded.runner, loaded.tokenizer, FixedK(args.k), config, compute=compute)
        await engine.start()
        try:
            completions = await asyncio.gather(*(engine.generate(p, params) for p in prompts))
        finally:
            await engine.stop()
    finally:
        compute.shutdown(wait=True)
    return list(zip(prompts, completions, strict=True))


def print_completions(results: list[tuple[str, Completion]], as_json: bool) -> None:
    for prompt, done in results:
        if as_json:
            record = {
                "prompt": prompt,
                "text": done.text,
                "token_ids": done.token_ids,
                "finish_reason": done.finish_reason,
                "steps": done.stats.steps,
                "drafted": done.stats.drafted,
                "accepted": done.stats.accepted,
            }
            print(json.dumps(record), flush=True)
        else:
            print(prompt + done.text, flush=True)
            rate = done.stats.accepted / done.stats.drafted if done.stats.drafted else 0.0
            print(
                f"--- {len(done.token_ids)} tokens in {done.stats.steps} steps, "
                f"acceptance {rate:.2f}, finish: {done.finish_reason}",
                file=sys.stderr,
            )
