"""A steady decode step at one batch size, ours (the openvino runtime, speculation off) against
OpenVINO GenAI's continuous batching, and where ours spends the time between its infers.

B requests of the same prompt length arrive at once, each decoding OUT tokens; a side's step is
the median gap between streamed tokens while all B decode. The two sides alternate, 4 turns
each. Then ours alone, 2 more runs, with its infers and the runner's decode calls timed: before
the infer (inputs built), after it (tokens read back), and from one decode's return to the next
one's start (the event loop's hand-off, sharing the GIL with the streaming of the step before).

    python docs/data/xeon-quick/burst-prefill/host_gap.py OVENV/bin/python B PROMPT OUT OUT.json
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from adaptivespec.bench.machine import machine
from adaptivespec.bench.openvino_peer import OpenVINO
from adaptivespec.bench.traffic import Request, Served
from adaptivespec.bench.workload_engines import Harness, adaptive_policy
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.engine import compute_thread
from adaptivespec.engine.loader import load_runner

TURNS = 4


def steady_gap(served: list[Served]) -> float:
    start = max(s.chunk_times[0] for s in served)
    end = min(s.chunk_times[-1] for s in served)
    gaps = [
        b - a
        for s in served
        for a, b in zip(s.chunk_times, s.chunk_times[1:], strict=False)
        if a >= start and b <= end
    ]
    return statistics.median(gaps) * 1e3


async def main() -> None:
    python, batch, prompt, out = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    compute = compute_thread()
    models = ModelConfig(runtime="openvino")
    config = EngineConfig(
        max_batch=32, max_queued=256, max_context=prompt + out + 16, threads=2, models=models
    )
    loaded = await asyncio.get_running_loop().run_in_executor(compute, load_runner, config)
    corpus = loaded.tokenizer.encode("\n".join(held_out_documents()), add_special_tokens=False)
    traffic = [Request(0.0, corpus[i * 997 : i * 997 + prompt], out) for i in range(batch)]
    peer = OpenVINO.prepare(python, loaded.target.path, 32, "f32")
    harness = Harness(loaded, compute, config, adaptive_policy(loaded), 2, peer, 0.25)
    steps: dict[str, list[float]] = {"ours-off": [], "openvino": []}
    for turn in range(TURNS):
        for name in ["ours-off", "openvino"][:: 1 if turn % 2 == 0 else -1]:
            steps[name].append(steady_gap(await harness.server(name)(traffic)))
            print(name, turn, f"{steps[name][-1]:.2f} ms", flush=True)
    split = await _host_split(harness, traffic)
    report: dict[str, Any] = {
        "machine": await asyncio.get_running_loop().run_in_executor(
            compute, machine, loaded.runner.hardware_key
        ),
        "batch": batch,
        "prompt_tokens": prompt,
        "output_tokens": out,
        "step_ms": {name: {"median": statistics.median(v), "turns": v} for name, v in steps.items()},
        "ours_host_ms": split,
    }
    report["machine"]["peers"] = harness.versions
    Path(sys.argv[5]).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("step_ms", "ours_host_ms")}, indent=1))
    harness.adaptive.stop()
    compute.shutdown()


async def _host_split(harness: Harness, traffic: list[Request]) -> list[dict[str, float]]:
    """Per run: the medians, over steps, of the runner's time before and after its infer and of
    the hand-off to the next decode call."""
    events: list[tuple[str, float]] = []
    runner = harness.loaded.runner
    decode, request = runner.decode, runner.target.request

    def timed_decode(*args: Any) -> Any:
        events.append(("d0", time.perf_counter()))
        result = decode(*args)
        events.append(("d1", time.perf_counter()))
        return result

    class TimedRequest:
        def infer(self, *args: Any, **kwargs: Any) -> Any:
            events.append(("i0", time.perf_counter()))
            result = request.infer(*args, **kwargs)
            events.append(("i1", time.perf_counter()))
            return result

    runner.decode, runner.target.request = timed_decode, TimedRequest()
    runs = []
    try:
        for _ in range(2):
            events.clear()
            await harness.server("ours-off")(traffic)
            pre, post, hand_off, infer = [], [], [], []
            for j in range(len(events) - 4):
                window = events[j : j + 5]
                if [e[0] for e in window] == ["d0", "i0", "i1", "d1", "d0"]:
                    pre.append(window[1][1] - window[0][1])
                    infer.append(window[2][1] - window[1][1])
                    post.append(window[3][1] - window[2][1])
                    hand_off.append(window[4][1] - window[3][1])
            runs.append(
                {
                    "steps": len(pre),
                    "infer_ms": statistics.median(infer) * 1e3,
                    "before_infer_ms": statistics.median(pre) * 1e3,
                    "after_infer_ms": statistics.median(post) * 1e3,
                    "hand_off_ms": statistics.median(hand_off) * 1e3,
                }
            )
    finally:
        runner.decode, runner.target.request = decode, request
    return runs


if __name__ == "__main__":
    asyncio.run(main())
