"""The engines `bench workload` serves its traffic with, sharing one loaded model and thread:
ours (speculation off, a fixed K, the controller), transformers' static batches, OpenVINO GenAI."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from adaptivespec.bench import prefill_stall, static_batching
from adaptivespec.bench.openvino_peer import OpenVINO
from adaptivespec.bench.traffic import Request, Served
from adaptivespec.config import EngineConfig
from adaptivespec.controller.controller import Controller, ControllerConfig
from adaptivespec.controller.learning_settings import LearningSettings
from adaptivespec.controller.task import run_controller
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.loader import LoadedModels
from adaptivespec.engine.packed_linear import torch_linears
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.engine.telemetry import Subscription

Serve = Callable[[list[Request]], Coroutine[Any, Any, list[Served]]]


@dataclass(frozen=True, slots=True)
class Harness:
    """What every engine of the run shares: the loaded models, their thread, the controller."""

    loaded: LoadedModels
    compute: ThreadPoolExecutor
    config: EngineConfig  # ours; its max_batch is also the static server's batch
    adaptive: AdaptivePolicy
    fixed_k: int
    openvino: OpenVINO | None
    static_window_s: float  # the static server's admission window
    versions: dict[str, str] = field(default_factory=dict)  # of the peers, as they report them

    def server(self, name: str) -> Serve:
        if name.startswith("openvino"):
            return lambda traffic: self._serve_openvino(
                traffic, self.fixed_k if name == "openvino-spec" else 0
            )
        if name == "hf-static":
            return self._serve_static
        policies: dict[str, SpecPolicy] = {"ours-off": FixedK(0), "ours-fixed": FixedK(self.fixed_k)}
        policy = policies.get(name, self.adaptive.policy)
        return lambda traffic: self._serve_ours(policy, traffic)

    async def _serve_static(self, traffic: list[Request]) -> list[Served]:
        """transformers' model as it loads: our engine's packed linears are switched off for it."""
        pad = self.loaded.tokenizer.pad_token_id
        pad_id = int(pad if pad is not None else min(self.loaded.runner.eos_token_ids, default=0))
        model = self.loaded.runner.target.model
        with torch_linears([model]):
            return await static_batching.serve(
                model, pad_id, traffic, self.config.max_batch, self.compute, window_s=self.static_window_s
            )

    async def _serve_openvino(self, traffic: list[Request], lookup_k: int) -> list[Served]:
        if self.openvino is None:
            raise RuntimeError("the openvino engines need --openvino-python")
        # OpenVINO on the threads ours were asked for (0: each its own choice).
        threads = self.config.threads
        served, versions = await asyncio.to_thread(self.openvino.serve, traffic, lookup_k, threads)
        self.versions.update(versions)
        return served

    async def _serve_ours(self, policy: SpecPolicy, traffic: list[Request]) -> list[Served]:
        # Every round replays the same requests: a drafter that remembers earlier requests (a
        # suffix tree's global cache) must not draft from this request's own earlier output.
        self.loaded.runner.forget_history()
        engine = Engine(self.loaded.runner, self.loaded.tokenizer, policy, self.config, compute=self.compute)
        await engine.start()
        if policy is self.adaptive.policy:
            self.adaptive.attach(engine)
        began = time.perf_counter()

        async def one(request: Request) -> Served:
            await asyncio.sleep(max(0.0, began + request.arrival - time.perf_counter()))
            params = SamplingParams(max_tokens=request.max_tokens, temperature=0.0, ignore_eos=True)
            # Timed from its arrival as scheduled, as every engine's requests are (traffic.py),
            # not from when this task woke to send it.
            served = Served(request, began + request.arrival, [], [])
            async for event in engine.submit(request.prompt, params):
                if event.finish_reason == "error":
                    raise RuntimeError(f"a request failed: {event.error}")
                if event.token_ids:
                    served.chunk_times.append(time.perf_counter())
                    served.tokens.extend(event.token_ids)
            return served

        try:
            return list(await asyncio.gather(*(one(r) for r in traffic)))
        finally:
            self.adaptive.stop()
            await engine.stop()

    async def stalls(self, corpus: list[int], streams: int, long_tokens: int) -> dict[str, Any]:
        print(f"\na {long_tokens}-token prompt arrives into {streams} decoding streams (K=0):", flush=True)
        results = {}
        for whole in (True, False):
            stall = await prefill_stall.measure(
                self.loaded.runner, self.loaded.tokenizer, self.compute, self.config, corpus,
                streams=streams, long_tokens=long_tokens, whole=whole,
            )  # fmt: skip
            results[stall.chunking] = asdict(stall)
            print(
                f"  {stall.chunking:<6} steady ITL p99 {stall.steady_itl_p99_ms:.0f} ms, during its prefill "
                f"p99 {stall.long_prompt_itl_p99_ms:.0f} ms (max {stall.long_prompt_itl_max_ms:.0f}), "
                f"{stall.ratio:.2f}x; its TTFT {stall.long_prompt_ttft_ms:.0f} ms",
                flush=True,
            )
        paced = results["paced"]
        keys = ("steady_itl_p99_ms", "long_prompt_itl_p99_ms", "long_prompt_tokens", "streams")
        return {**{key: paced[key] for key in keys}, "paced": paced, "whole": results["whole"]}


class AdaptivePolicy:
    """The controller of the adaptive runs. `renew` starts a fresh one, so that each rate and
    round measures what the controller learns within it, not what an earlier run taught it."""

    def __init__(self, make: Callable[[], Controller]) -> None:
        self._make = make
        self.controller = make()
        self._task: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None

    @property
    def policy(self) -> SpecPolicy:
        return self.controller.live

    def renew(self) -> None:
        self.stop()
        self.controller = self._make()

    def attach(self, engine: Engine) -> None:
        self.stop()
        self._subscription = engine.telemetry.subscribe()
        self._task = asyncio.create_task(run_controller(self.controller, self._subscription))

    def stop(self) -> None:
        """Stops listening, after learning from every step the engine already reported."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        while self._subscription is not None and not self._subscription.queue.empty():
            self.controller.ingest(self._subscription.queue.get_nowait())
        self._subscription = None


def adaptive_policy(loaded: LoadedModels) -> AdaptivePolicy:
    runner = loaded.runner
    settings = LearningSettings().capped(runner.max_spec_tokens)
    return AdaptivePolicy(
        lambda: Controller(
            runner.model_key, runner.hardware_key, ControllerConfig(settings=settings), runner.methods
        )
    )
