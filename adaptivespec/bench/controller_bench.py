"""`adaptivespec bench controller`: the controller's cost per step and its memory over a long run."""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from dataclasses import replace

from adaptivespec.controller.controller import Controller
from adaptivespec.engine.telemetry import StepTelemetry, survival_counts


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = kinds.add_parser(
        "controller", help="microseconds per ingest+decision, and memory after 10k / 1M records"
    )
    bench.add_argument("--records", type=int, default=1_000_000)


def _records() -> list[StepTelemetry]:
    """A realistic mix: 8 batch sizes x 3 draft lengths x 3 context lengths."""
    base = StepTelemetry("pair", "bench", 1, 0, 300.0, 0, 0, 1, 0.0, 0.01, 0.01, 0.0, 0, ())
    out = []
    for batch in (1, 2, 4, 8, 16, 32, 64, 128):
        for k in (0, 2, 4):
            for ctx in (300.0, 900.0, 3000.0):
                seconds = 0.01 * (1 + 0.2 * k) * (1 + batch / 32)
                per_row = [min(k, (row * 7 + k) % (k + 2)) for row in range(batch)] if k else [0] * batch
                accepted = sum(per_row)
                out.append(
                    replace(
                        base,
                        batch_size=batch,
                        k=k,
                        mean_context_len=ctx,
                        drafted=k * batch,
                        accepted=accepted,
                        emitted=batch + accepted,
                        verify_seconds=seconds,
                        step_seconds=seconds,
                        width=k,
                        kept_at_least=survival_counts(per_row, k),
                    )
                )
    return out


def run(args: argparse.Namespace) -> None:
    records = _records()
    controller = Controller("pair", "bench")
    tracemalloc.start()
    memory = {}
    began = time.perf_counter()
    for i in range(args.records):
        controller.ingest(records[i % len(records)])
        if i % 2000 == 0:
            controller.log.take()  # the store's periodic flush
        if i + 1 in (10_000, args.records):
            controller.log.take()
            gc.collect()
            memory[i + 1] = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    traced = time.perf_counter() - began
    controller = Controller("pair", "bench")
    began = time.perf_counter()
    count = min(args.records, 200_000)
    for i in range(count):
        controller.ingest(records[i % len(records)])
        if i % 2000 == 0:
            controller.log.take()
    per_step = (time.perf_counter() - began) / count * 1e6
    print(f"ingest + decision: {per_step:.1f} us per step (mean over {count:,} records, no tracing)")
    for n, used in sorted(memory.items()):
        print(f"traced memory after {n:,} records: {used / 1024:.1f} KiB")
    print(f"({args.records:,} records under tracemalloc took {traced:.0f} s)")
