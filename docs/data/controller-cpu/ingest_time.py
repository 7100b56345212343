"""What the controller costs the event loop a step: `Controller.ingest` (learning from one
step's record and publishing its decision) and `Delivery.decoded` (a step's tokens to their
requests), each timed on every call while `bench workload` serves its light load with the
controller. On a 2-core machine every millisecond of Python here is a millisecond of a step:
the loop shares the GIL with the compute thread and a core with OpenVINO's two threads.

    python docs/data/controller-cpu/ingest_time.py OUT.json [bench workload arguments]

Run it from outside the checkout with PYTHONPATH at the tree to measure (a worktree for
"before"): the checkout's editable install wins over PYTHONPATH otherwise.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import adaptivespec
from adaptivespec import cli
from adaptivespec.bench.machine import machine
from adaptivespec.controller.controller import Controller
from adaptivespec.engine.delivery import Delivery

DEFAULT = "bench workload --quick --engines ours-adaptive --no-burst --long-prompt 0 --rounds 2".split()


def timed(owner: type, name: str, into: list[float]) -> None:
    original = getattr(owner, name)

    def wrapper(self: object, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            into.append(time.perf_counter() - began)

    setattr(owner, name, wrapper)


def summary(seconds: list[float]) -> dict[str, float]:
    ms = np.array(seconds) * 1e3
    quantiles = {f"p{q}_ms": float(np.percentile(ms, q)) for q in (50, 90, 99)}
    return {"calls": len(ms), "mean_ms": float(ms.mean()), **quantiles, "max_ms": float(ms.max())}


def main() -> None:
    out, argv = Path(sys.argv[1]), sys.argv[2:] or DEFAULT
    calls: dict[str, list[float]] = {"ingest": [], "deliver": []}
    timed(Controller, "ingest", calls["ingest"])
    timed(Delivery, "decoded", calls["deliver"])
    cli.main(argv)
    result = {
        "machine": machine(),
        "package": str(Path(adaptivespec.__file__).parent),
        "workload": argv,
        **{name: summary(seconds) for name, seconds in calls.items()},
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k in calls}, indent=1))


if __name__ == "__main__":
    main()
