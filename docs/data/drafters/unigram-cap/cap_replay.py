"""Prompt lookup with a 1-gram match's drafts capped, replayed over the default model's greedy
outputs with `bench copy-ceiling`'s replay: tokens per verify step, and drafts verified per step
(what a verify that feeds each row its own drafts costs), for each cap.

    python docs/data/drafters/unigram-cap/cap_replay.py --json docs/data/drafters/unigram-cap/replay.json
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

import torch

from adaptivespec.bench.copy_ceiling import decode_requests, replay_steps
from adaptivespec.bench.machine import machine
from adaptivespec.bench.sibling_runners import sibling
from adaptivespec.bench.traffic_mixes import prompts
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.proposers import NgramProposer

MIXES = [("chat", 0), ("chat", 1), ("code-edit", 1), ("agent", 0)]
CAPS = [None, 1, 2, 3]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(2)
    config = EngineConfig(
        models=ModelConfig(proposer="ngram", runtime="openvino"),
        max_batch=1,
        max_context=4096,
        max_spec_tokens=16,
        threads=2,
    )
    loaded = load_runner(config, progress=False)
    figures = {}
    for traffic, seed in MIXES:
        requests = prompts(traffic, loaded.tokenizer, 8, seed)
        decoded = decode_requests(lambda: sibling(loaded.runner, None, config), requests, 128, 16)
        for k in (4, 8):
            for cap in CAPS:
                per_step, drafts = replay_steps(decoded, [partial(NgramProposer, 3, 1, cap)], k)
                figures[f"{traffic} seed {seed} K {k} cap {cap}"] = {
                    "tokens_per_step": per_step,
                    "drafts_per_step": drafts,
                }
                where = f"{traffic:9} seed {seed} K {k} cap {cap!s:4}"
                print(f"{where}: {per_step:.2f} tokens, {drafts:.2f} drafts a step")
    if args.json:
        args.json.write_text(
            json.dumps({"machine": machine(loaded.runner.hardware_key), "figures": figures}, indent=2)
        )


if __name__ == "__main__":
    main()
