"""Rules for choosing, per row, between prompt lookup's and suffix decoding's drafts, replayed
over the default model's greedy outputs (the `bench copy-ceiling` replay, batch 1).

Usage: python docs/data/drafters/copy/row_rules.py TRAFFIC SEED [CACHE_DIR]
(decodes the requests once, with the default model, into CACHE_DIR; prints tokens per verify
step at K = 4, 8, 16 for each rule). Its output is row_rules.txt beside it. The rule kept is
"longer" (engine/copy_proposer.py); docs/decisions.md, 2026-12-06, third entry.
"""

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np
import torch

from adaptivespec.bench import copy_ceiling
from adaptivespec.bench.drafters import add_requests_and_drafters, batch_one_config
from adaptivespec.bench.sibling_runners import sibling
from adaptivespec.bench.traffic_mixes import prompts
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.verification import kept_prefix

KS = [4, 8, 16]


def decoded_requests(traffic: str, seed: int, cache_dir: Path) -> tuple[list, argparse.Namespace]:
    parser = argparse.ArgumentParser()
    add_requests_and_drafters(parser, copy_ceiling.MODEL_FREE, max_tokens=128)
    args = parser.parse_args(
        ["--traffic", traffic, "--seed", str(seed)] + (["--requests", "12"] if traffic == "agent" else [])
    )
    args.threads = 2
    cache = cache_dir / f"{traffic}-{seed}.pkl"
    config = batch_one_config(args, KS)
    if cache.exists():
        return pickle.loads(cache.read_bytes()), config
    loaded = load_runner(config)
    requests = prompts(args.traffic, loaded.tokenizer, args.requests, args.seed)
    fresh = lambda: sibling(loaded.runner, None, config)  # noqa: E731
    decoded = copy_ceiling.decode_requests(fresh, requests, args.max_tokens, max(KS))
    cache.write_bytes(pickle.dumps(decoded))
    return decoded, config


def tokens_per_step(decoded: list, config: object, k: int, rule: str, alpha: float = 0.5) -> float:
    """Rules: "ngram", "suffix" alone; "best" (the draft that keeps more, known in hindsight);
    "longer" (suffix's when at least as long and not empty); "longer>" (suffix's only when
    strictly longer); "half" (suffix's when at least half as long); "score" (the drafter with
    the higher exponentially weighted count of what it would have kept over the tokens the
    step wrote, weight `alpha`)."""
    parts = [copy_ceiling._maker(name, config)() for name in ("ngram", "suffix")]
    width = max(len(r.prompt) + len(r.written) for r in decoded) + k + 1
    rows = RowState.allocate(1, width, torch.device("cpu"))
    only = np.arange(1)
    tokens = steps = 0
    for request in decoded:
        prompt = list(request.prompt)
        for part in parts:
            part.retire_rows(rows, [0])
        rows.write_prompt(0, prompt + list(request.written))
        for part in parts:
            part.prefill(0, [prompt], [0])
        target = np.full(len(request.written) + k + 1, -1, dtype=np.int64)
        target[: len(request.written)] = request.written
        made, score, last = 1, [0.0, 0.0], 1
        while made < len(request.output):
            rows.set_lens(0, [len(prompt) + made])
            chosen = target[None, made : made + k + 1]
            drafts = [part.draft_rows(rows, only, k) for part in parts]
            kept = [int(kept_prefix(chosen, *d)[0]) for d in drafts]
            n_lookup, n_suffix = (int(d[1][0]) for d in drafts)
            pick = {
                "ngram": 0,
                "suffix": 1,
                "best": int(np.argmax(kept)),
                "longer": int(n_suffix >= n_lookup and n_suffix > 0),
                "longer>": int(n_suffix > n_lookup),
                "half": int(n_suffix > 0 and 2 * n_suffix >= n_lookup),
                "score": last if score[0] == score[1] else int(np.argmax(score)),
            }[rule]
            written = kept[pick] + 1
            score = [(1 - alpha) * s + alpha * min(kept[i], written) for i, s in enumerate(score)]
            last = pick
            made += written
            steps += 1
        rows.set_lens(0, [len(prompt) + min(made, len(request.written))])
        tokens += len(request.output) - 1
    return tokens / steps


def main() -> None:
    traffic, seed = sys.argv[1], int(sys.argv[2])
    cache_dir = Path(sys.argv[3]) if len(sys.argv) > 3 else Path("/tmp")
    torch.set_num_threads(2)
    decoded, config = decoded_requests(traffic, seed, cache_dir)
    for k in KS:
        rules = ("ngram", "suffix", "best", "longer", "longer>", "half")
        figures = [f"{rule}:{tokens_per_step(decoded, config, k, rule):.2f}" for rule in rules]
        for a in (0.2, 0.5, 0.8):
            figures.append(f"score{a}:{tokens_per_step(decoded, config, k, 'score', a):.2f}")
        print(f"{traffic} seed {seed} K={k}", " ".join(figures), flush=True)


if __name__ == "__main__":
    main()
