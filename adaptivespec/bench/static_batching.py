"""The naive server `bench workload` compares against: static batches through `generate`.

When idle, it waits for the oldest waiting request's admission window (`window_s`, as a
batching server's queue delay) to pass or for `batch` requests to have arrived, whichever
comes first, takes up to `batch` of them, left-pads them, and runs transformers' `generate`
until the longest is done; no request joins a batch once it has started. Without the window
a batch would start with the first arrival alone and every request behind it would wait out
a whole batch: a server run that way is a straw man, not a peer. A stopping criterion,
called after every step, timestamps each step, so TTFT and ITL are what a streaming client
of such a server would see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from math import inf
from typing import cast

import torch
from transformers import GenerationConfig, PreTrainedModel, StoppingCriteria, StoppingCriteriaList

from adaptivespec.bench.traffic import Request, Served


class _StepClock(StoppingCriteria):
    """Never stops anything; only notes when each step's tokens were ready."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
        self.times.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


async def serve(
    model: PreTrainedModel,
    pad_id: int,
    requests: list[Request],
    batch: int,
    compute: ThreadPoolExecutor,
    *,
    window_s: float = 0.0,
) -> list[Served]:
    loop = asyncio.get_running_loop()
    began = time.perf_counter()
    pending = sorted(requests, key=lambda r: r.arrival)
    served: list[Served] = []
    while pending:
        # The batch starts once the oldest waiting request's window has passed, or once the
        # batch is full, whichever comes first.
        full = pending[batch - 1].arrival if len(pending) >= batch else inf
        wait = began + min(pending[0].arrival + window_s, full) - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        now = time.perf_counter() - began
        group = [r for r in pending[:batch] if r.arrival <= now]
        pending = pending[len(group) :]
        outputs = await loop.run_in_executor(compute, _generate, model, pad_id, group)
        for request, (tokens, times) in zip(group, outputs, strict=True):
            served.append(Served(request, began + request.arrival, times, tokens))
    order = {id(r): i for i, r in enumerate(requests)}
    return sorted(served, key=lambda s: order[id(s.request)])


@torch.inference_mode()
def _generate(
    model: PreTrainedModel, pad_id: int, group: list[Request]
) -> list[tuple[list[int], list[float]]]:
    width = max(len(r.prompt) for r in group)
    device = next(model.parameters()).device
    ids = torch.full((len(group), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for row, request in enumerate(group):
        ids[row, width - len(request.prompt) :] = torch.tensor(request.prompt, device=device)
        mask[row, width - len(request.prompt) :] = 1
    clock = _StepClock()
    steps = max(r.max_tokens for r in group)
    # Every request runs to its max_tokens, as ours do with ignore_eos: no EOS stops a row.
    config = GenerationConfig(
        do_sample=False, max_new_tokens=steps, min_new_tokens=0, eos_token_id=[], pad_token_id=pad_id
    )
    generate = cast(Callable[..., torch.Tensor], model.generate)
    out = generate(
        input_ids=ids,
        attention_mask=mask,
        generation_config=config,
        stopping_criteria=StoppingCriteriaList([clock]),
    )
    new = out[:, width:].tolist()
    return [(new[row][: r.max_tokens], clock.times[: r.max_tokens]) for row, r in enumerate(group)]
