"""`bench coupling`: what coupled sampling costs a draft model against standard rejection
sampling, on held-out text.

At each position of held-out windows, the target's p and the draft's q (both after the same
temperature) give the acceptance of a sampled draft under rejection sampling, 1 - TV(p, q),
and under coupling (the draft proposes the Gumbel-max of q under the noise the target's
Gumbel-max uses), P(the two Gumbel-maxes agree), estimated over `--draws` noise draws. A
deterministic draft (prompt lookup) is kept with probability p(d) under both rules.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from adaptivespec.bench.arguments import numbers
from adaptivespec.bench.machine import machine
from adaptivespec.bench.steps import prompt_windows
from adaptivespec.engine.demo_models import ensure_demo_pair, held_out_documents
from adaptivespec.engine.hardware import set_threads


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = kinds.add_parser(
        "coupling", help="coupled against rejection sampling: a draft model's acceptance"
    )
    bench.add_argument("--temperatures", type=numbers, default=[0.7, 0.8, 1.0])
    bench.add_argument("--windows", type=int, default=16)
    bench.add_argument("--length", type=int, default=64)
    bench.add_argument("--draws", type=int, default=256, help="noise draws per position")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--json", type=Path, default=None)


def run(args: argparse.Namespace) -> None:
    set_threads(args.threads)
    pair = ensure_demo_pair()  # trains the pair on first use: outside inference mode
    with torch.inference_mode():
        _measure(args, pair.target, pair.draft)


def _measure(args: argparse.Namespace, target_dir: Path, draft_dir: Path) -> None:
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    windows = torch.tensor(prompt_windows(tokenizer, held_out_documents(), args.windows, args.length))
    skip = args.length // 4  # positions with some context behind them
    t_logits = target(input_ids=windows).logits[:, skip:].flatten(0, 1)  # [N, V]
    d_logits = draft(input_ids=windows).logits[:, skip:].flatten(0, 1)
    width = min(t_logits.shape[-1], d_logits.shape[-1])
    t_logits, d_logits = t_logits[:, :width], d_logits[:, :width]
    generator = torch.Generator().manual_seed(args.seed)
    rows: list[dict[str, Any]] = []
    for temperature in args.temperatures:
        p = torch.softmax(t_logits / temperature, dim=-1)
        q = torch.softmax(d_logits / temperature, dim=-1)
        tv = 0.5 * (p - q).abs().sum(dim=-1)  # [N]
        agree = torch.zeros(p.shape[0])
        for _ in range(args.draws):
            uniform = torch.rand(p.shape, generator=generator).clamp_min(torch.finfo(torch.float32).tiny)
            gumbel = -(-uniform.log()).log()
            agree += ((p.log() + gumbel).argmax(-1) == (q.log() + gumbel).argmax(-1)).float()
        coupled = agree / args.draws
        # Inverse-CDF coupling: one uniform u per position, each side takes the token whose CDF
        # interval holds u; they agree with the summed overlap of the two tokens' intervals.
        fp, fq = p.cumsum(-1), q.cumsum(-1)
        low = torch.maximum(fp - p, fq - q)
        inverse_cdf = (torch.minimum(fp, fq) - low).clamp_min(0).sum(-1)
        row = {
            "temperature": temperature,
            "positions": int(p.shape[0]),
            "rejection_acceptance": float((1 - tv).mean()),
            "coupled_acceptance": float(coupled.mean()),
            "coupled_over_rejection": float(coupled.mean() / (1 - tv).mean()),
            "inverse_cdf_acceptance": float(inverse_cdf.mean()),
            "inverse_cdf_over_rejection": float(inverse_cdf.mean() / (1 - tv).mean()),
            "lower_bound_acceptance": float(((1 - tv) / (1 + tv)).mean()),
            "median_tv": statistics.median(tv.tolist()),
        }
        rows.append(row)
        print(
            f"T={temperature:.2f}: rejection keeps {row['rejection_acceptance']:.3f} of drafts, coupling "
            f"{row['coupled_acceptance']:.3f} ({row['coupled_over_rejection']:.3f}x; bound "
            f"{row['lower_bound_acceptance']:.3f}); inverse-CDF coupling {row['inverse_cdf_acceptance']:.3f} "
            f"over {row['positions']} positions"
        )
    report = {"machine": machine(), "pair": "demo", "draws": args.draws, "rows": rows}
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
