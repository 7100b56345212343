"""What switching the draft model back on costs beyond the arms themselves: its catch-up in a
forward of its own (FOLDED_LAG = 2, the commit before) against folded into drafting's first
forward (FOLDED_LAG = 8), alternating in one process.

Each round runs both settings (which goes first alternates), and each setting every pattern
at every batch size, on the same seeded requests (bench control's loop: `HFLoop.segment`).
Patterns: K = 0 only, K = 1 only, and K = 0 and K = 1 in turns of 1, 3 and 6 steps. A turns
pattern's goodput is set against the mix its steps would give at the two fixed patterns' mean
step times and tokens in the same setting: below 1 is what switching costs.

    python docs/data/control-hf/avx2/switch-cost/switch_cost.py --runtime RUNTIME \
        --json docs/data/control-hf/avx2/switch-cost/switch-cost-RUNTIME.json

The target's forwards run on torch (`--runtime torch`, as `bench control` runs them) or on
OpenVINO (serve's default on a CPU); the draft model runs on torch either way.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from adaptivespec.bench.hf_loop import HFLoop
from adaptivespec.bench.machine import machine
from adaptivespec.bench.steps import prompt_windows
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine import proposers
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.sim.workload import Phase

BATCHES = (1, 8, 16)
PATTERNS = {
    "k0": [0],
    "k1": [1],
    "turns-1": [0, 1],
    "turns-3": [0] * 3 + [1] * 3,
    "turns-6": [0] * 6 + [1] * 6,
}
SETTINGS = {"apart": 2, "folded": 8}  # FOLDED_LAG
NEW_TOKENS = 128


class Turns:
    """K from a repeating list, one entry a step."""

    def __init__(self, ks: list[int]) -> None:
        self.ks, self.step = ks, 0

    def k_for(self, batch_size: int, context_len: int) -> int:
        k = self.ks[self.step % len(self.ks)]
        self.step += 1
        return k

    def method_for(self, batch_size: int, context_len: int) -> str | None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--runtime", choices=("torch", "openvino"), default="torch")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    config = EngineConfig(
        models=ModelConfig(target="demo", draft="demo", proposer="draft", runtime=args.runtime),
        max_batch=max(BATCHES),
        max_queued=max(BATCHES),
        max_context=64 + NEW_TOKENS + 16,
        threads=2,
    )
    loaded = load_runner(config, progress=False)
    runner = loaded.runner
    assert isinstance(runner, HFRunner)
    prompts = prompt_windows(loaded.tokenizer, held_out_documents(), 256, 64)
    loop = HFLoop(runner, prompts, NEW_TOKENS, tuple(Phase(b, args.steps) for b in BATCHES), seed=0)
    loop.settle()
    for phase in range(len(BATCHES)):
        loop.warm(phase)
    measured: dict[tuple[str, int, str], list[tuple[int, float]]] = {}
    for r in range(args.rounds):
        for name in list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]:
            proposers.FOLDED_LAG = SETTINGS[name]
            for phase, batch in enumerate(BATCHES):
                for pattern, ks in PATTERNS.items():
                    result = loop.segment(phase, r, args.steps, Turns(ks))
                    measured.setdefault((name, batch, pattern), []).append((result.tokens, result.seconds))
    rows = []
    for name, lag in SETTINGS.items():
        for batch in BATCHES:
            per_step = {}
            for fixed in ("k0", "k1"):
                tokens, seconds = zip(*measured[(name, batch, fixed)], strict=True)
                steps = args.rounds * args.steps
                per_step[fixed] = (sum(tokens) / steps, sum(seconds) / steps)
            for pattern, ks in PATTERNS.items():
                share = ks.count(1) / len(ks)
                mix = ((1 - share) * per_step["k0"][0] + share * per_step["k1"][0]) / (
                    (1 - share) * per_step["k0"][1] + share * per_step["k1"][1]
                )
                goodputs = [tokens / seconds for tokens, seconds in measured[(name, batch, pattern)]]
                ratios = [g / mix for g in goodputs]
                row = {
                    "setting": name,
                    "folded_lag": lag,
                    "batch": batch,
                    "pattern": pattern,
                    "goodput_median": statistics.median(goodputs),
                    "over_mix_median": statistics.median(ratios),
                    "over_mix_range": [min(ratios), max(ratios)],
                }
                rows.append(row)
                print(
                    f"{name} batch {batch} {pattern}: {row['goodput_median']:.0f} tok/s, over the mix "
                    f"{row['over_mix_median']:.3f} [{min(ratios):.3f}, {max(ratios):.3f}]",
                    flush=True,
                )
    if args.json:
        report = {
            "machine": machine(runner.hardware_key),
            "runtime": args.runtime,
            "rounds": args.rounds,
            "steps_per_segment": args.steps,
            "rows": rows,
        }
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
