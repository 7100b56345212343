"""The `sim` runner: the engine's Runner interface, priced by the roofline on a virtual clock.

Nothing sleeps. Each decode step reports the virtual seconds the roofline gives it, and
each row accepts draft tokens with its own rate, drawn per request from the workload.
"""

from __future__ import annotations

import numpy as np

from adaptivespec.engine.runner import DecodeOutput, PrefillItem, PrefillOutput
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import AcceptanceModel
from adaptivespec.sim.workload import Workload

_FILLER = [ord(c) for c in "simulated tokens "]
SIM_METHOD = "draft"  # the one drafter the roofline prices


class SimRunner:
    def __init__(
        self, cost: StepCostModel, workload: Workload, *, max_batch: int, max_spec_tokens: int, seed: int
    ) -> None:
        self.cost = cost
        self.acceptance = AcceptanceModel(workload)
        self.max_batch = max_batch
        self.max_spec_tokens = max_spec_tokens
        self.methods: tuple[str, ...] = (SIM_METHOD,) if max_spec_tokens > 0 else ()
        self.eos_token_ids: frozenset[int] = frozenset()
        self.vocab_rows = 256  # the simulator streams bytes (ByteTokenizer)
        draft = cost.draft.name if cost.draft is not None else "none"
        self.model_key = f"{cost.target.name}+{draft}:bf16"
        self.hardware_key = f"sim:{cost.hardware.name}"
        self.clock = 0.0  # virtual seconds elapsed
        self._rng = np.random.default_rng(seed)
        self._alpha = np.zeros(max_batch)
        self._context = np.zeros(max_batch, dtype=np.int64)

    def describe(self) -> str:
        return f"sim runner: {self.model_key} on {self.hardware_key} (virtual clock)"

    def prefill(self, row_start: int, items: list[PrefillItem]) -> PrefillOutput:
        fresh = [row_start + r for r, item in enumerate(items) if item.start == 0]
        self._alpha[fresh] = self.acceptance.draw(self._rng, len(fresh))  # a new request's own rate
        for r, item in enumerate(items):
            self._context[row_start + r] = item.stop + int(item.completes)
        fed = sum(item.stop - item.start for item in items)
        seconds = self.cost.prefill_seconds(fed, len(items))
        self.clock += seconds
        return PrefillOutput([_FILLER[0] if item.completes else None for item in items], seconds)

    def decode(self, batch: int, k: int, method: str | None = None) -> DecodeOutput:
        if method not in (None, SIM_METHOD):
            raise ValueError(f"the simulator drafts only with {SIM_METHOD!r}, not {method!r}")
        k = min(k, self.max_spec_tokens)
        cost = self.cost.step(batch, k, float(self._context[:batch].sum()))
        accepted = AcceptanceModel.accepted(self._alpha[:batch], self._rng.random(batch), k)
        self._context[:batch] += accepted + 1
        self.clock += cost.step_seconds
        tokens = [
            [_FILLER[(i + j) % len(_FILLER)] for j in range(a + 1)] for i, a in enumerate(accepted.tolist())
        ]
        return DecodeOutput(
            tokens=tokens,
            drafted=[k] * batch,
            accepted=accepted.tolist(),
            k=k,
            method=SIM_METHOD if k > 0 else "",
            width=k,
            draft_seconds=cost.draft_seconds,
            verify_seconds=cost.verify_seconds,
            step_seconds=cost.step_seconds,
        )

    @property
    def fuses_prompts(self) -> bool:
        return False  # the simulator prices a prefill on its own

    def decode_with_prompts(self, batch: int, items: list[PrefillItem]) -> tuple[DecodeOutput, PrefillOutput]:
        prefill = self.prefill(batch, items)
        return self.decode(batch, 0), prefill

    def move_rows(self, srcs: list[int], dsts: list[int]) -> None:
        self._alpha[dsts] = self._alpha[srcs]
        self._context[dsts] = self._context[srcs]
