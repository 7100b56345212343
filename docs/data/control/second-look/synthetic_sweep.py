"""The tests' synthetic machine (tests/controller/noisy_machine.py) over batch 1-16, one drafter.

For each setting and seed: a fresh controller meets batches 1, 2, 4, 8, 12 and 16 in turn, N
steps each, on a machine whose step costs grow with the batch and K; each step is slowed by a
lognormal jitter, optionally by stalls (a share of the steps at 1.5-3x) and by spells (the log
of a load factor an AR(1) process, 0.9 from step to step). A seed's figure is the mean over the
batches of the realised goodput over the best fixed arm's. Deterministic; prints one JSON
object: per setting, the figure of every seed. Run it from a checkout of the code to measure:
`python docs/data/control/second-look/synthetic_sweep.py > OUT.json`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path.cwd()))

from adaptivespec.controller.controller import Controller  # noqa: E402
from tests.controller.noisy_machine import ARMS, Machine, Run  # noqa: E402

BATCHES = (1, 2, 4, 8, 12, 16)
SPELL_AR = 0.9
# (steps per batch, jitter sigma, stall share, seeds, spell sigma)
SETTINGS = (
    (60, 0.06, 0.0, 100, 0.0),
    (60, 0.03, 0.0, 100, 0.0),
    (60, 0.06, 0.1, 100, 0.0),
    (20, 0.06, 0.1, 100, 0.0),
    (20, 0.06, 0.0, 100, 0.0),
    (100, 0.04, 0.1, 60, 0.05),
)


def machine(batch: int, alpha: float, stall: float) -> Machine:
    base = 0.008 + 0.0006 * batch
    per_k = 0.0012 + 0.00055 * batch
    verify_slope = 0.0005 * batch / base
    return Machine(base, per_k / base, alpha, stall_share=stall, stall=(1.5, 3.0), verify_slope=verify_slope)


def sweep(seed: int, steps: int, jitter: float, stall: float, spell_sigma: float) -> float:
    controller = Controller("m", "h", methods=("draft",))
    rng = np.random.default_rng([seed, 7])
    alpha = 0.6 + 0.25 * rng.random()
    spell, ratios = 0.0, []
    for batch in BATCHES:
        m = machine(batch, alpha, stall)
        run = Run(m, batch, seed * 100 + batch)
        for _ in range(steps):
            record = run.step(controller.live)
            spell = SPELL_AR * spell + rng.normal(0, spell_sigma)
            factor = float(np.exp(rng.normal(0, jitter) + spell))
            record = dataclasses.replace(
                record,
                step_seconds=record.step_seconds * factor,
                verify_seconds=record.verify_seconds * factor,
                draft_seconds=record.draft_seconds * factor,
            )
            controller.ingest(record)
        tokens = sum(m.tokens(k) for k in run.ks)
        seconds = sum(m.seconds(k) for k in run.ks)
        ratios.append(tokens / seconds / max(m.goodput(k) for k in ARMS))
    return float(np.mean(ratios))


def main() -> None:
    out = {}
    for steps, jitter, stall, seeds, spell in SETTINGS:
        key = f"steps={steps} jitter={jitter} stalls={stall} spells={spell}"
        out[key] = [sweep(seed, steps, jitter, stall, spell) for seed in range(seeds)]
        print(key, f"{np.mean(out[key]):.4f}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
