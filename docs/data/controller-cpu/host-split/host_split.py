"""Where a batch-1 step's host time goes, with the controller on (the quick light load).

OpenVINO's infers, the runner's decode calls and the engine's resume and submit are timed, and
the gap between two infers is split into: post (the infer's end to decode's return), hand-off
(to the next decode's start: the loop waking, submitting, and the compute thread getting the GIL
back) and pre (to its infer's start). DEFER=1 swaps in an `Engine._decode` whose loop delivers a
step only once the next step's infer has started (the experiment, not kept); DEFER=0 runs the
engine's own order.

    DEFER=0|1 python host_split.py OUT.json bench workload --quick --engines ours-adaptive \\
        --no-burst --long-prompt 0 --rounds 2
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import numpy as np

from adaptivespec import cli
from adaptivespec.bench.machine import machine
from adaptivespec.engine import engine as engine_module
from adaptivespec.engine import hf_runner, openvino_target

DEFER = os.environ.get("DEFER", "0") == "1"
infers: list[tuple[float, float, int, int]] = []  # start, end, rows, tokens
decodes: list[tuple[float, float, int, int]] = []  # start, end, batch, k
resumes: list[float] = []
submits: list[tuple[float, float]] = []
started: dict[str, Any] = {"loop": None, "event": None}


class TimedRequest:
    def __init__(self, request: Any) -> None:
        self._request = request

    def infer(self, inputs: dict[str, np.ndarray], **options: Any) -> Any:
        event = started["event"]
        if event is not None:
            started["loop"].call_soon_threadsafe(event.set)
        began = time.perf_counter()
        out = self._request.infer(inputs, **options)
        infers.append((began, time.perf_counter(), len(inputs["past_lens"]), len(inputs["input_ids"])))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


def patch() -> None:
    target_init = openvino_target.OpenVINOTarget.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        target_init(self, *args, **kwargs)
        self.request = TimedRequest(self.request)

    decode = hf_runner.HFRunner.decode

    def timed_decode(self: Any, batch: int, k: int, method: str | None = None) -> Any:
        began = time.perf_counter()
        out = decode(self, batch, k, method)
        decodes.append((began, time.perf_counter(), batch, k))
        return out

    stays = engine_module.Engine._batch_stays

    def timed_stays(self: Any, batch: Any, out: Any) -> bool:
        resumes.append(time.perf_counter())
        return stays(self, batch, out)

    submit = engine_module.Engine._submit_decode

    def timed_submit(self: Any, batch: Any, lengths: Any) -> Any:
        began = time.perf_counter()
        step = submit(self, batch, lengths)
        submits.append((began, time.perf_counter()))
        return step

    openvino_target.OpenVINOTarget.__init__ = init  # type: ignore[method-assign]
    hf_runner.HFRunner.decode = timed_decode  # type: ignore[method-assign]
    engine_module.Engine._batch_stays = timed_stays  # type: ignore[method-assign]
    engine_module.Engine._submit_decode = timed_submit  # type: ignore[method-assign]
    if DEFER:
        engine_module.Engine._decode = deferred_decode  # type: ignore[method-assign]


async def deferred_decode(self: Any) -> None:
    """`Engine._decode`, but the step is delivered once the next one's infer has started."""
    step = self._ahead if self._ahead is not None else await self._launch()
    self._ahead = None
    if step is None:
        return
    out = await step.result
    overlapped = self._batch_stays(step.batch, out)
    if overlapped:
        lengths = [len(s) + len(t) for s, t in zip(step.batch, out.tokens, strict=True)]
        started["loop"], started["event"] = asyncio.get_running_loop(), asyncio.Event()
        self._ahead = self._submit_decode(step.batch, lengths)
        began = asyncio.ensure_future(started["event"].wait())
        await asyncio.wait([began, self._ahead.result], return_when=asyncio.FIRST_COMPLETED)
        began.cancel()
        started["event"] = None
    self.delivery.decoded(step.batch, step.context, out, overlapped=overlapped)


def within(times: list[float], lo: float, hi: float) -> list[float]:
    return [t for t in times if lo <= t <= hi]


def split() -> dict[str, Any]:
    """Consecutive batch-1 decodes with one infer each and none between them."""
    steps, handoffs = [], []
    for a, b in zip(decodes, decodes[1:], strict=False):
        if a[2] != 1 or b[2] != 1:
            continue
        ia = [i for i in infers if a[0] <= i[0] <= a[1]]
        ib = [i for i in infers if b[0] <= i[0] <= b[1]]
        if len(ia) != 1 or len(ib) != 1 or any(a[1] < i[0] < b[0] for i in infers):
            continue
        post, hand, pre = a[1] - ia[0][1], b[0] - a[1], ib[0][0] - b[0]
        if post + hand + pre > 0.05:
            continue  # a prompt fed between them on the loop's side
        steps.append((post, hand, pre, ib[0][1] - ib[0][0], ib[0][3]))
        resume = within(resumes, a[1], b[0])
        submit = [s for s in submits if a[1] <= s[0] <= b[0]]
        if len(resume) == 1 and len(submit) == 1:
            r, (s0, s1) = resume[0], submit[0]
            handoffs.append((r - a[1], s0 - r, s1 - s0, b[0] - s1))
    ms = np.array(steps) * 1e3
    result: dict[str, Any] = {
        "steps": len(ms),
        **{f"{name}_ms_p50": float(np.median(ms[:, i])) for i, name in enumerate(("post", "handoff", "pre"))},
        "gap_ms_p50": float(np.median(ms[:, :3].sum(axis=1))),
        "infer_ms_p50": float(np.median(ms[:, 3])),
        "by_tokens": {},
    }
    for tokens in sorted({int(t) for t in ms[:, 4] / 1e3}):
        rows = ms[ms[:, 4] / 1e3 == tokens]
        if len(rows) >= 15:
            result["by_tokens"][tokens] = {
                "steps": len(rows),
                "infer_ms_p50": float(np.median(rows[:, 3])),
                "gap_ms_p50": float(np.median(rows[:, :3].sum(axis=1))),
            }
    if handoffs:
        h = np.array(handoffs) * 1e3
        names = ("loop_wakes", "loop_to_submit", "submit", "compute_gets_gil")
        result["handoff_split_ms_p50"] = {name: float(np.median(h[:, i])) for i, name in enumerate(names)}
    return result


def main() -> None:
    out, argv = sys.argv[1], sys.argv[2:]
    patch()
    cli.main(argv)
    result = {"machine": machine(), "defer": DEFER, "workload": argv, **split()}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))


if __name__ == "__main__":
    main()
