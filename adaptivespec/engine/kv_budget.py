"""How many rows the preallocated KV cache may hold: the memory budget for it, divided by what
one row of `max_context` positions takes in every model the step runs.

The cache is allocated whole at start (each row writes at its own columns, see kvcache.py), so
an unbounded `max_batch x max_context` could take most of a machine's memory before the first
request. The budget caps it; the rows it buys, and what they take, are printed at start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from adaptivespec.errors import ConfigError

CPU_SHARE = 0.25  # of the machine's memory, on a CPU: the weights, activations and OS need the rest
CUDA_SHARE = 0.5  # of the device's free memory after the weights, as vLLM's default leaves room too


def default_budget(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free * CUDA_SHARE)
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return int(pages * page_size * CPU_SHARE)


@dataclass(frozen=True, slots=True)
class KVPlan:
    rows: int  # rows the cache is allocated for: max_batch, or fewer to fit the budget
    asked_rows: int  # max_batch as configured
    row_bytes: int  # one row of every model's cache, all layers, keys and values
    budget: int  # bytes

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes

    def describe(self, positions: int) -> str:
        mib = 2**20
        text = (
            f"KV cache: {self.rows} rows x {positions} positions = {self.nbytes / mib:.0f} MiB "
            f"(budget {self.budget / mib:.0f} MiB; --kv-cache-memory)"
        )
        if self.rows < self.asked_rows:
            text += f"; max_batch lowered from {self.asked_rows} to {self.rows} to fit"
        return text


def plan(budget: int, max_batch: int, row_bytes: int, positions: int) -> KVPlan:
    """The rows a budget buys, at most `max_batch`; refuses one that cannot hold a single row."""
    rows = min(max_batch, budget // max(row_bytes, 1))
    if rows < 1:
        raise ConfigError(
            f"one KV cache row of {positions} positions takes {row_bytes / 2**20:.1f} MiB, more than the "
            f"budget of {budget / 2**20:.1f} MiB; raise --kv-cache-memory or lower --max-context"
        )
    return KVPlan(rows, max_batch, row_bytes, budget)
