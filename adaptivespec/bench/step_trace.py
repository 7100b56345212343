"""`bench control --trace FILE`: one JSON line per step of the adaptive policy, to read what its
controller saw and did without wrapping it: the arm each step ran, the drafts it verified a row
(fewer than K when its drafter found fewer), its seconds and tokens, and its cell's decision and
next arm once the step was learned from, and what the cell priced each measured arm at then:
its expected tokens a row, its step time and the steps that stands on. Each line also gives
torch's thread team at that step, since the engine may resize it between steps on a shared
machine (thread_governor.py) and every arm's step time moves with it."""

from __future__ import annotations

import json
from typing import TextIO

import torch

from adaptivespec.controller.arms import arm
from adaptivespec.controller.cell_table import cell_key
from adaptivespec.controller.controller import Controller
from adaptivespec.engine.telemetry import StepTelemetry


class StepTrace:
    def __init__(self, out: TextIO, controller: Controller) -> None:
        self.out = out
        self.controller = controller
        self.steps = 0

    def __call__(self, record: StepTelemetry) -> None:
        """Writes the line of a step the controller has just ingested."""
        self.steps += 1
        context = int(record.mean_context_len)
        controller = self.controller
        live = controller.live
        next_k = live.k_for(record.batch_size, context)
        decided = controller.decision(record.batch_size, context)
        line = {
            "step": self.steps,
            "batch": record.batch_size,
            "context": context,
            "ran": str(arm(controller.drafter(record.method), record.k)),
            "width": record.width,
            "verified_width": record.verified_width,
            "step_ms": round(record.step_seconds * 1e3, 3),
            "verify_ms": round(record.verify_seconds * 1e3, 3),
            "catch_up_ms": round(record.catch_up_seconds * 1e3, 3),
            "emitted": record.emitted,
            "threads": torch.get_num_threads(),
            "decided": None if decided is None else str(decided),
            "next": str(arm(live.method_for(record.batch_size, context) or controller.drafter(""), next_k)),
            "priced": self._priced(record.batch_size, context),
        }
        self.out.write(json.dumps(line) + "\n")

    def _priced(self, batch: int, context: int) -> dict[str, list[float]]:
        """Per measured arm of the step's cell: [tokens a row, step ms, steps it stands on]."""
        key = cell_key(batch, context)
        if key not in self.controller.cells:
            return {}
        prices = self.controller.cells[key].prices(self.controller.acceptance_of(key[0]))
        return {
            str(a): [round(prices.tokens[a], 3), round(seconds * 1e3, 3), round(prices.support[a], 1)]
            for a, seconds in sorted(prices.seconds.items())
        }
