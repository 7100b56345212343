"""The tests' synthetic machine (tests/controller/noisy_machine.py) with two cheap drafters,
prompt lookup and suffix decoding, over batch 1, 2, 4, ..., 32 in turn: a shadowed drafter's
hope at one standard error (`SHADOWED_HOPE_Z` 1.0, the rule before) and at half of one (0.5).

The machine is test_bucket_sweep.py's (a 20 ms weights read plus 2.5 ms a row, 1.2 ms a row per
draft token verified, suffix's draft a little dearer), with the two drafters' acceptance set
per pair, and optionally a share of the steps stalled 1.5-3x. For each pair and seed a fresh
controller meets every batch for N steps; a seed's figure is the mean over the batches of the
realised goodput over the best fixed arm's. Deterministic; prints one JSON object. Run it from
a checkout: `python docs/data/control/shadow-hope/two_drafter_sweep.py STEPS STALL > OUT.json`.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from adaptivespec.controller import acceptance  # noqa: E402
from adaptivespec.controller.controller import Controller  # noqa: E402
from tests.controller.noisy_machine import ARMS, Machine, Run  # noqa: E402

BATCHES = (1, 2, 4, 8, 16, 32)
PAIRS = ((0.55, 0.7), (0.7, 0.55), (0.6, 0.6), (0.4, 0.8), (0.75, 0.8), (0.3, 0.35))  # (ngram, suffix)
SEEDS = 30


def machines(batch: int, ngram: float, suffix: float, stall: float) -> dict[str, Machine]:
    base = 0.020 + 0.0025 * batch
    verify = 0.0012 * batch / base
    draft = verify + 0.001 * batch + 0.005
    stalls = {"stall_share": stall, "stall": (1.5, 3.0)}
    return {
        "ngram": Machine(base, verify, ngram, **stalls),
        "suffix": Machine(base, draft, suffix, verify_slope=verify, **stalls),
    }


def sweep(seed: int, steps: int, pair: tuple[float, float], stall: float, z: float) -> list[float]:
    acceptance.SHADOWED_HOPE_Z = z
    controller = Controller("m", "h", methods=("ngram", "suffix"))
    ratios = []
    for batch in BATCHES:
        drafters = machines(batch, *pair, stall)
        run = Run(drafters["ngram"], batch, seed * 100 + batch, drafters=drafters)
        for _ in range(steps):
            controller.ingest(run.step(controller.live))
        ran = [drafters[m or "ngram"] for m in run.methods]
        tokens = sum(m.tokens(k) for m, k in zip(ran, run.ks, strict=True))
        seconds = sum(m.seconds(k) for m, k in zip(ran, run.ks, strict=True))
        ratios.append(tokens / seconds / max(m.goodput(k) for m in drafters.values() for k in ARMS))
    return ratios


def main() -> None:
    steps, stall = int(sys.argv[1]), float(sys.argv[2])
    out = {}
    for pair in PAIRS:
        before = [sweep(seed, steps, pair, stall, 1.0) for seed in range(SEEDS)]
        after = [sweep(seed, steps, pair, stall, 0.5) for seed in range(SEEDS)]
        diffs = [statistics.mean(a) - statistics.mean(b) for a, b in zip(after, before, strict=True)]
        out[f"ngram {pair[0]}, suffix {pair[1]}"] = {
            "before": statistics.mean(statistics.mean(b) for b in before),
            "after": statistics.mean(statistics.mean(a) for a in after),
            "paired_difference": statistics.mean(diffs),
            "standard_error": statistics.stdev(diffs) / len(diffs) ** 0.5,
            "batch_1_difference": statistics.mean(a[0] - b[0] for a, b in zip(after, before, strict=True)),
        }
    print(json.dumps({"steps": steps, "stall_share": stall, "seeds": SEEDS, "pairs": out}, indent=2))


if __name__ == "__main__":
    main()
