"""A model's forward compiled with torch.compile, for the step's small passes.

A decode step at small batch is mostly Python and operator dispatch, which compiling
removes. Dynamic shapes keep the graphs few: dynamo specializes only sizes 0 and 1 and
arguments that are Python values, so one graph serves every batch of 2 or more and every
verify width, and the cache's growing length needs no recompilation. Four graphs per model
(batch 1 or more, one token or several) are compiled once, at warm-up, before serving;
prompts always run eagerly, since their shapes vary without bound and their cost is
arithmetic that compiling does not remove.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo.config
import torch._inductor.config
from torch._dynamo.utils import counters
from transformers import PreTrainedModel

# Graphs per code object: a target and a draft of one architecture share `forward`'s code,
# so the two models' eight graphs count against one limit (dynamo's default is 8).
RECOMPILE_LIMIT = 32


class CompiledForward:
    """Calls the compiled model for the step's passes and the eager one for everything else."""

    def __init__(self, model: PreTrainedModel) -> None:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        self.eager: Callable[..., Any] = model
        # On a CPU, freezing folds the weights into the graph as constants, and inductor then
        # prepacks every linear's weight for oneDNN, as `linear = "packed"` does for the eager
        # step (docs/results.md has what it buys). Set in inductor's config, as the recompile
        # limit is: passed in `options` it was not applied, and the step lost most of the gain.
        if next(model.parameters()).device.type == "cpu":
            torch._inductor.config.freezing = True
        self.compiled: Callable[..., Any] = torch.compile(model, dynamic=True)
        self.enabled = True

    def __call__(self, *, step: bool, **inputs: Any) -> Any:
        run = self.compiled if self.enabled and step else self.eager
        return run(**inputs)


def compile_time_note(began: float, graphs_before: int) -> str:
    """What warm-up cost, for the log: seconds and graphs compiled."""
    graphs = compiled_graphs() - graphs_before
    return f"compiled {graphs} graphs in {time.perf_counter() - began:.0f} s"


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process (its own counter)."""
    return int(counters["stats"]["unique_graphs"])
