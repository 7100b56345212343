"""The tests' synthetic machine (tests/controller/noisy_machine.py) with a drafter that drafts
what it finds, as prompt lookup and suffix decoding do: each row finds some number of drafts
per step and drafts min(K, found), so an arm's steps verify different widths. Batch 1, one
drafter; the controller as it is, and as it was before each step's time was moved to its arm's
typical width (verify_widths.py), which is the same controller told that every step verified K.

For each machine and seed a fresh controller runs N steps; a seed's figure is the goodput of the
arms it chose, at the machine's unstalled expected costs, over the best fixed K's. Paired by
seed. Deterministic; prints one JSON object. Run it from a checkout:
`python docs/data/control/verify-width/found_drafts_sweep.py STEPS STALL > OUT.json`.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from adaptivespec.controller.arms import Arm  # noqa: E402
from adaptivespec.controller.controller import Controller  # noqa: E402
from adaptivespec.controller.evidence import CellEvidence  # noqa: E402
from tests.controller.noisy_machine import ARMS, Machine, Run  # noqa: E402

MACHINES = {  # relative cost per verified draft, acceptance, and (drafts found, probability)
    "cheap-verify, best K 8": dict(slope=0.06, alpha=0.8, found=((0, 0.3), (2, 0.3), (16, 0.4))),
    "steep, short or long": dict(slope=0.12, alpha=0.6, found=((1, 0.4), (2, 0.2), (16, 0.4))),
    "steep, mostly none": dict(slope=0.15, alpha=0.65, found=((0, 0.5), (3, 0.2), (16, 0.3))),
    "steep, spread": dict(slope=0.12, alpha=0.7, found=((0, 0.2), (1, 0.2), (3, 0.2), (6, 0.2), (16, 0.2))),
}
SEEDS = 60
OBSERVE = CellEvidence.observe


def as_before(self: CellEvidence, k: Arm, *step: float, width: int | None = None) -> float:
    """The controller before: every step taken as having verified its arm's K."""
    return OBSERVE(self, k, *step)


def chosen(machine: Machine, seed: int, steps: int) -> float:
    controller = Controller("m", "h")
    run = Run(machine, 1, seed)
    for _ in range(steps):
        controller.ingest(run.step(controller.live))
    best = max(machine.goodput(k) for k in ARMS)
    tokens = sum(machine.tokens(k) for k in run.ks)
    return tokens / sum(machine.seconds(k) for k in run.ks) / best


def main() -> None:
    steps, stall = int(sys.argv[1]), float(sys.argv[2])
    out: dict[str, object] = {"steps": steps, "stall_share": stall, "stall": [3.0, 6.0], "seeds": SEEDS}
    for name, shape in MACHINES.items():
        machine = Machine(stall_share=stall, **shape)  # type: ignore[arg-type]
        CellEvidence.observe = as_before  # type: ignore[method-assign]
        before = [chosen(machine, seed, steps) for seed in range(SEEDS)]
        CellEvidence.observe = OBSERVE  # type: ignore[method-assign]
        after = [chosen(machine, seed, steps) for seed in range(SEEDS)]
        diffs = [a - b for a, b in zip(after, before, strict=True)]
        best = max(ARMS, key=machine.goodput)
        out[name] = {
            "best_k": best,
            "arms_over_best": {k: round(machine.goodput(k) / machine.goodput(best), 4) for k in ARMS},
            "before_mean": round(statistics.mean(before), 4),
            "after_mean": round(statistics.mean(after), 4),
            "difference_mean": round(statistics.mean(diffs), 4),
            "difference_se": round(statistics.stdev(diffs) / len(diffs) ** 0.5, 4),
            "after_worst": round(min(after), 4),
            "before_worst": round(min(before), 4),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
