"""Host time a decode step takes on the openvino runtime, before and after a change: each side's
code runs in processes of its own, alternating, round after round.

A process serves held-out documents' openings (100-token prompts, 200 tokens each, greedy) on the
default model, through the engine, at batch 1 and 8, speculation off and prompt lookup with suffix
decoding at K = 5. Per step it times the runner's `decode` call, the OpenVINO `infer` calls inside
it, and the loop's turnaround from one `decode` to the next; the host's part of a step is the decode
less its infers plus the turnaround (medians over the steps, from the tenth). The OpenVINO time
moves from process to process with the machine; the host part, read step by step, is what a change
to the host code moves. The gap between a stream's token chunks is recorded beside it.

    python docs/data/host-time/host_ab.py --before OLD_TREE --json docs/data/host-time/host-ab.json

OLD_TREE: a checkout of the earlier commit (`git worktree add /tmp/old COMMIT`); the other side is
this checkout. Each round runs both sides, their order alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CASES = [(1, 0), (1, 5), (8, 0), (8, 5)]  # (batch, K)


def _timed(runner: Any) -> list[tuple[float, float, float]]:
    """Wraps the runner's decode and its OpenVINO request's infer; each decode then appends when
    it began and ended and the seconds its infers took."""
    inside: list[float] = []  # each infer's seconds, as they run
    steps: list[tuple[float, float, float]] = []
    infer, decode = runner.target.request.infer, runner.decode

    def timed_infer(*args: object, **kwargs: object) -> object:
        began = time.perf_counter()
        try:
            return infer(*args, **kwargs)
        finally:
            inside.append(time.perf_counter() - began)

    def timed_decode(*args: object) -> object:
        before, began = len(inside), time.perf_counter()
        try:
            return decode(*args)
        finally:
            steps.append((began, time.perf_counter(), sum(inside[before:])))

    runner.target.request.infer = timed_infer
    runner.decode = timed_decode
    return steps


def measure() -> dict[str, object]:
    """Runs in a child process, importing adaptivespec from the PYTHONPATH it was given."""
    import asyncio

    from adaptivespec.bench.machine import machine
    from adaptivespec.config import EngineConfig, ModelConfig
    from adaptivespec.engine.demo_models import held_out_documents
    from adaptivespec.engine.engine import Engine, compute_thread
    from adaptivespec.engine.loader import load_runner
    from adaptivespec.engine.sampling import SamplingParams
    from adaptivespec.engine.static_policy import FixedK

    compute = compute_thread()
    models = ModelConfig(runtime="openvino", proposer="copy")
    config = EngineConfig(models=models, max_batch=8, max_queued=64, max_context=1024, threads=2)
    loaded = compute.submit(load_runner, config, progress=False).result()
    runner, tokenizer = loaded.runner, loaded.tokenizer
    documents = held_out_documents()
    steps = _timed(runner)  # each decode: began, ended, seconds inside infer

    async def case(batch: int, k: int) -> dict[str, float]:
        prompts = [tokenizer.encode(d[:600])[:100] for d in documents[:batch]]
        params = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)
        engine = Engine(runner, tokenizer, FixedK(k), config, compute=compute)
        await engine.start()

        async def one(prompt: list[int]) -> list[float]:
            stamps = []
            async for event in engine.submit(prompt, params):
                if event.token_ids:
                    stamps.append(time.perf_counter())
            return stamps

        await asyncio.gather(*(one(p) for p in prompts))  # warm-up
        runner.forget_history()
        steps.clear()
        streams = await asyncio.gather(*(one(p) for p in prompts))
        await engine.stop()
        gaps = [b - a for stamps in streams for a, b in zip(stamps[10:], stamps[11:], strict=False)]
        inner = [ended - began - infer_s for began, ended, infer_s in steps[10:]]
        turnaround = [b[0] - a[1] for a, b in zip(steps[10:], steps[11:], strict=False)]
        host = statistics.median(inner) + statistics.median(turnaround)
        return {
            "gap_ms": statistics.median(gaps) * 1e3,
            "infer_ms": statistics.median(s[2] for s in steps[10:]) * 1e3,
            "in_decode_ms": statistics.median(inner) * 1e3,
            "turnaround_ms": statistics.median(turnaround) * 1e3,
            "host_ms": host * 1e3,
            "steps": len(steps),
        }

    async def main() -> dict[str, object]:
        return {f"b{b}k{k}": await case(b, k) for b, k in CASES}

    result = asyncio.run(main())
    result["machine"] = compute.submit(machine, runner.hardware_key).result()
    compute.shutdown()
    return result


def run_side(tree: Path) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, cwd="/", capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout of the earlier commit")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure()))
        return
    if args.before is None:
        parser.error("--before is required")
    sides = {"before": args.before.resolve(), "after": Path(__file__).resolve().parents[3]}
    runs: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
    for turn in range(args.rounds):
        for side in ("before", "after") if turn % 2 == 0 else ("after", "before"):
            runs[side].append(run_side(sides[side]))
            print(
                f"round {turn + 1} {side}: "
                + ", ".join(
                    f"{c} host {runs[side][-1][c]['host_ms']:.2f} ms" for c in (f"b{b}k{k}" for b, k in CASES)
                ),
                flush=True,
            )
    summary = {}
    for b, k in CASES:
        name = f"b{b}k{k}"
        row: dict[str, object] = {}
        for side, side_runs in runs.items():
            for key in ("gap_ms", "infer_ms", "in_decode_ms", "turnaround_ms", "host_ms"):
                values = [float(r[name][key]) for r in side_runs]
                row[f"{side}_{key}"] = [statistics.median(values), min(values), max(values)]
            row[f"{side}_steps"] = sorted({int(r[name]["steps"]) for r in side_runs})
        paired = [
            float(old[name]["host_ms"]) - float(new[name]["host_ms"])
            for old, new in zip(runs["before"], runs["after"], strict=True)
        ]
        saved = [statistics.median(paired), min(paired), max(paired)]
        row["host_saved_ms"] = saved
        summary[name] = row
        print(
            f"{name}: host saved {saved[0]:.2f} ms a step [{saved[1]:.2f}, {saved[2]:.2f}]; {row}", flush=True
        )
    report = {
        "machine": runs["after"][0]["machine"],
        "method": "each side in processes of its own, alternating; per process and case, medians over "
        "the steps from the tenth: decode less its infers, the turnaround between decodes, their sum "
        "(host_ms), the gap between token chunks; figures: medians over the rounds [min, max]; "
        "host_saved_ms paired by round",
        "rounds": args.rounds,
        "summary": summary,
        "runs": runs,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
