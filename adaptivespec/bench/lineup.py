"""Who runs in `bench control --backend hf`: the (drafter, K) sweep, the static policies, and
the learners, with the names the report uses for them.

With one drafter the sweep is k0..k8, as it always was. With several, every (drafter, K) arm is
a fixed contender ("suffix-k4"; static tables name no drafter, run the first, and pool with its
arms in the oracle's grouping, `hf_control._fixed_groups`), and each drafter also gets an
adaptive controller of its own ("adaptive-suffix"): the best single-drafter adaptive policy is
what choosing the drafter must beat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from adaptivespec.bench import learners
from adaptivespec.bench.interleaved import Contender
from adaptivespec.bench.oracle import ORACLE_ARMS, baseline_policies
from adaptivespec.controller.arms import Arm, arm_space
from adaptivespec.controller.controller import Controller
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.store.repository import Store


@dataclass(frozen=True, slots=True)
class Lineup:
    contenders: list[Contender]
    controller: Controller  # the adaptive contender's
    methods: tuple[str, ...]  # the runner's drafters, its default first
    sweep: dict[str, Arm]  # the fixed (drafter, K) contenders by name
    learners: list[str]  # "adaptive", "plain-ucb", and with several drafters "adaptive-<drafter>"

    @property
    def single_drafter_learners(self) -> list[str]:
        return [name for name in self.learners if name.startswith("adaptive-")]


def lineup(
    model_key: str,
    hardware_key: str,
    store: Store | None,
    methods: tuple[str, ...],
    trace: TextIO | None = None,
) -> Lineup:
    """`trace`: where the adaptive contender writes each step it learned from (step_trace.py)."""
    first = methods[0] if methods else ""
    sweep = {_name(a, len(methods)): a for a in arm_space(methods, ORACLE_ARMS)}
    fixed = [
        Contender(name, FixedK(a.k, None if a.method in ("", first) else a.method))
        for name, a in sweep.items()
    ]
    static = [Contender(name, policy) for name, policy in baseline_policies().items()]
    controller, adaptive = learners.adaptive(model_key, hardware_key, store, methods, trace)
    plain = learners.plain_ucb(ORACLE_ARMS)()
    learning = [
        Contender("adaptive", adaptive.policy, adaptive.on_step, fixed=False),
        Contender("plain-ucb", plain.policy, plain.on_step, fixed=False),
    ]
    if len(methods) > 1:
        for method in methods:
            _, alone = learners.adaptive(model_key, hardware_key, None, (method,))
            learning.append(Contender(f"adaptive-{method}", alone.policy, alone.on_step, fixed=False))
    names = [c.name for c in learning]
    return Lineup([*fixed, *static, *learning], controller, methods, sweep, names)


def _name(a: Arm, drafters: int) -> str:
    return f"k{a.k}" if a.k == 0 or drafters <= 1 else f"{a.method}-k{a.k}"
