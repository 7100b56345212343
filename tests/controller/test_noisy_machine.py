"""The controller on a machine doing other work: stalled steps, and switches that cost."""

from __future__ import annotations

import statistics

import numpy as np

from adaptivespec.controller.buckets import batch_bucket
from adaptivespec.controller.controller import Controller
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.engine.telemetry import StepTelemetry

from .noisy_machine import Machine, Run

SEEDS = range(30)
STEPS = 400


def _learn(machine: Machine, batch: int, seed: int, steps: int = STEPS) -> tuple[Controller, Run]:
    controller = Controller("m", "h")
    run = Run(machine, batch, seed)
    for _ in range(steps):
        assert controller.ingest(run.step(controller.live))
    return controller, run


def _fixed(machine: Machine, batch: int, seed: int, k: int, steps: int = STEPS) -> Run:
    run = Run(machine, batch, seed)
    for _ in range(steps):
        run.step(FixedK(k))
    return run


def test_stalled_steps_leave_the_decision_near_the_best() -> None:
    """15% of steps take 3-6x as long. Over 30 seeds the decision's true goodput must be within
    3% of the best in at least 24. The power check was run by hand: the controller these tests
    replaced (exponential means, a single step pricing an arm) met it in 19 of the same 30."""
    machine = Machine(stall_share=0.15)
    best = machine.goodput(machine.best())
    near = [k for k in (0, 1, 2, 3, 4, 5, 6, 8) if machine.goodput(k) >= 0.97 * best]
    assert near == [2, 3, 4]  # the check has power: K = 1 and K = 5 are outside it
    hits = sum(machine.goodput(_learn(machine, 8, seed)[0].decisions()[0].k) >= 0.97 * best for seed in SEEDS)
    assert hits >= 24


def _ran(machine: Machine, run: Run) -> float:
    """The goodput of the arms a run chose, at the machine's unstalled costs, over the best
    fixed K's: how good the choices were, whatever stalls each run happened to draw."""
    tokens = sum(machine.tokens(k) for k in run.ks)
    return tokens / sum(machine.seconds(k) for k in run.ks) / machine.goodput(machine.best())


def test_on_a_noisy_machine_it_keeps_close_to_the_best_fixed_k() -> None:
    """The arms chosen, against the best fixed K, over 30 seeds of 15% stalled steps: the
    median and every seed above a floor. (Judged at unstalled costs: realised goodput set
    against another run's goodput carries which of the two drew more stalls. The controller
    before the lower-quartile step times and the capped cost bounds scored median 0.991, worst
    0.921, on the same seeds.)"""
    machine = Machine(stall_share=0.15)
    ratios = [_ran(machine, _learn(machine, 8, seed)[1]) for seed in SEEDS]
    assert statistics.median(ratios) >= 0.98
    assert min(ratios) >= 0.90


def test_a_third_of_the_steps_stalled_at_batch_1() -> None:
    """A 2-core host with one core taken: a third of the steps stall, at batch 1, where K = 4
    is best and every K from 2 up is within 6% of it (steps cost about the same whatever K).
    Over 30 seeds the arms chosen keep a median of 0.95 of the best and a worst of 0.75. The
    controller before the lower-quartile step times and the capped cost bounds scored a
    median of 0.916 here (the power check): a stalled step at a small K bounded every larger
    K's cost, and they were priced out unseen."""
    machine = Machine(slope=0.04, alpha=0.55, stall_share=0.35, stall=(3.0, 5.0))
    assert machine.best() == 4
    ratios = [_ran(machine, _learn(machine, 1, seed, steps=300)[1]) for seed in SEEDS]
    assert statistics.median(ratios) >= 0.95
    assert min(ratios) >= 0.75


def test_a_drafter_that_drafts_what_it_finds_is_priced_at_its_typical_width() -> None:
    """Prompt lookup and suffix decoding draft what they find: here a row finds 1 draft 40% of
    the time, 2 20%, and 16 or more 40%, so an arm's steps verify 1, 2 or K drafts a row. Steps
    cost 12% more per draft verified (a larger batch on a CPU): K = 3 is best, K = 8 11% below
    it. Over 60 seeds of 60 steps at batch 1 the arms chosen keep a mean of 0.965 of the best
    (0.978 when written). The power check: the controller before it priced an arm by its
    narrowest steps' time, and so rated every large K too high; it kept 0.946 on the same seeds
    (docs/data/control/verify-width/)."""
    machine = Machine(slope=0.12, alpha=0.6, found=((1, 0.4), (2, 0.2), (16, 0.4)))
    assert machine.best() == 3
    assert machine.goodput(8) < 0.9 * machine.goodput(3)
    ratios = [_ran(machine, _learn(machine, 1, seed, steps=60)[1]) for seed in range(60)]
    assert statistics.mean(ratios) >= 0.965


def test_a_catch_up_is_charged_to_the_switch_not_to_the_arm() -> None:
    """K = 0 and K = 1 nearly tie, so the controller keeps exploring from K = 0, and each time
    the drafter catches up on what it missed. The arms' step times stay their own, the switch's
    cost is kept apart, and where it is dear the controller switches less often and holds what
    it switched to longer (20 seeds each, the same stalls)."""
    costly = Machine(slope=0.6, alpha=0.6, stall_share=0.1, catch_up_per_token=0.002)
    free = Machine(slope=0.6, alpha=0.6, stall_share=0.1)
    assert abs(costly.goodput(1) / costly.goodput(0) - 1) < 0.01
    held: dict[float, list[int]] = {costly.catch_up_per_token: [], free.catch_up_per_token: []}
    for seed in range(20):
        for machine in (costly, free):
            controller, run = _learn(machine, 8, seed)
            held[machine.catch_up_per_token] += _runs_of_drafting(run.ks)
            cell = next(iter(controller.cells.values()))
            for arm, stat in cell.evidence.seconds.items():
                # A catch-up here costs 3x a step or more; stalls move a robust mean far less.
                if stat.samples >= 12:
                    assert abs(stat.mean / machine.seconds(arm.k) - 1) <= 0.3, (seed, arm)
            switch = cell.evidence.switch.get("draft")
            if machine is costly and switch is not None and switch.count:
                assert switch.mean >= 8 * 2 * costly.catch_up_per_token  # two steps missed, or more
    dear, cheap = held[costly.catch_up_per_token], held[free.catch_up_per_token]
    assert len(dear) < len(cheap)
    assert statistics.mean(dear) > statistics.mean(cheap)


def _runs_of_drafting(ks: list[int]) -> list[int]:
    """Lengths of the stretches of K > 0 steps that follow a K = 0 step."""
    runs, current, after_off = [], 0, False
    for k in ks:
        if k:
            current += 1
        else:
            if current and after_off:
                runs.append(current)
            current, after_off = 0, True
    return runs


def test_a_fresh_cell_tries_the_arms_nearest_its_decision_first() -> None:
    machine = Machine()
    _, run = _learn(machine, 1, seed=0, steps=60)
    start = run.ks[0]
    tried = list(dict.fromkeys(run.ks))  # in order of first use
    assert sorted(tried[1:3]) == [start - 1, start + 1]
    # What it then settles on at batch 1 rests on a few rows' acceptance, so it is judged over
    # seeds, not on one: the arms run, against the best fixed K, 0.970 on average over these 20
    # (0.976 over 40). Before the next K's hope (arm_prices.py) 0.957 (0.962 over 40): the
    # decision's next K was not tried again once a prior-shaped curve priced it below K = 1.
    # A controller held at K = 1, the runner-up, scores 0.926.
    ratios = [_ran(machine, _learn(machine, 1, seed, steps=60)[1]) for seed in range(20)]
    assert machine.goodput(1) / machine.goodput(machine.best()) < 0.93
    assert statistics.mean(ratios) >= 0.965


def test_a_short_horizon_spends_no_step_on_an_arm_that_cannot_beat_the_decision() -> None:
    """Drafting pays 2.5x here (a cheap drafter, acceptance 0.8, batch 8): a plain step, even
    at the cheapest cost the other arms allow it, keeps less than the decision is measured to,
    so in 20 steps it is not run. It stays a candidate (tried once the decision's estimate falls
    below its bound). Over 20 seeds the arms run keep 0.971 of the best fixed K on average; the
    controller that probed every candidate first ran one plain step in each and kept 0.950."""
    machine = Machine(slope=0.1)
    assert machine.goodput(0) < 0.45 * machine.goodput(machine.best())
    runs = [_learn(machine, 8, seed, steps=20)[1] for seed in range(20)]
    assert all(0 not in run.ks for run in runs)
    assert statistics.mean(_ran(machine, run) for run in runs) >= 0.965


def test_speculation_off_is_tried_once_drafting_stops_paying() -> None:
    """The same cell, then the drafts stop being kept: the decision's estimate falls below a
    plain step's bound, and the plain step is tried (at the 44th step here, the bound being
    K = 1's step less twice the secant above it, 0.9 of a plain step on this machine; at the
    11th with the looser bound before it, half of K = 1's step, while K walked down just the
    same), and it ends there: at the 94th step, and at the 86th before a decided off left K = 1
    what its first draft may yet keep (the estimate still lags the change there, and K = 1 ties
    off for 8 steps more)."""
    good, bad = Machine(slope=0.1), Machine(slope=0.1, alpha=0.0)
    controller = Controller("m", "h")
    run = Run(good, 8, seed=0)
    for _ in range(20):
        assert controller.ingest(run.step(controller.live))
    run = Run(bad, 8, seed=0)
    for _ in range(110):
        assert controller.ingest(run.step(controller.live))
    assert 0 in run.ks[:50] and run.ks[-15:] == [0] * 15


def _step(batch: int, k: int, seconds: float, kept_at_least: tuple[int, ...] | None = None) -> StepTelemetry:
    """A step of the default drafter whose rows keep each draft with probability 0.7 (or, given
    `kept_at_least`, as many rows as it says kept at least j drafts)."""
    if kept_at_least is None:
        kept_at_least = tuple(round(batch * 0.7**j) for j in range(1, k + 1))
    return StepTelemetry(
        "m", "h", batch, k, 300.0, k * batch, sum(kept_at_least), batch + sum(kept_at_least),
        0.0, seconds, seconds, 0.0, k, kept_at_least, method="draft" if k else "",
    )  # fmt: skip


def _after_one_slow_plain_step(off_seconds: float) -> tuple[list[int], int]:
    """Batch 9-12 measured plain steps at half of K = 1's; at batch 13-16 the one plain step
    read 19.3 ms (a stall), then K = 1 ran 8 steps at 22 ms
    (what a real run on this machine showed). The next 12 steps run at `off_seconds` plain,
    22 ms + 8 ms a draft token otherwise: the K run, and the decision at the end."""
    controller = Controller("m", "h")
    for record in [_step(12, 1, 0.021)] * 3 + [_step(12, 0, 0.011)] * 16:
        assert controller.ingest(record)
    for record in [_step(16, 0, 0.0193)] + [_step(16, 1, 0.022)] * 8:
        assert controller.ingest(record)
    ran = []
    for _ in range(12):
        k = controller.live.k_for(16, 300)
        ran.append(k)
        assert controller.ingest(_step(16, k, off_seconds if k == 0 else 0.022 + 0.008 * (k - 1)))
    (decision,) = [d for d in controller.decisions() if d.batch_bucket == batch_bucket(16)]
    return ran, decision.k


def test_one_slow_plain_step_does_not_price_speculation_off_out() -> None:
    """The machine is quiet (no stall tail), so an arm measured once is taken at its word,
    except where the cost model says it cannot cost that much: the smaller batch's ratio says
    K = 0 costs at most half of K = 1 here (11 ms), so K = 0 is tried again, and then decided.
    Without the ceiling K = 0 was never run again (fails: K = 1 for all 12 steps). Where the
    second plain step is as slow as the first, the evidence stands: one probe more, no switch."""
    ran, decided = _after_one_slow_plain_step(off_seconds=0.012)
    assert 0 in ran[:2] and decided == 0  # K = 2 may go first: the next K's hope (arm_prices.py)
    ran, decided = _after_one_slow_plain_step(off_seconds=0.0193)
    assert ran.count(0) == 1 and decided == 1


def _first_k_at_16(k1_seconds: float) -> tuple[int, int]:
    """Batch 9-12 measured K = 1 four times at `k1_seconds` and plain steps at 10 ms: the
    decision there, and the K a step at batch 16, where nothing was measured yet, runs."""
    controller = Controller("m", "h")
    for record in [_step(12, 1, k1_seconds)] * 4 + [_step(12, 0, 0.010)] * 4:
        assert controller.ingest(record)
    (decision,) = [d for d in controller.decisions() if d.batch_bucket == batch_bucket(12)]
    return decision.k, controller.live.k_for(16, 300)


def test_a_larger_batch_starts_from_off_where_a_smaller_one_found_drafting_a_tie() -> None:
    """At 16.5 ms K = 1 keeps under 1% more than off at 10 (as priced): a tie, and the decision
    stays at K = 1, within the hysteresis. Drafting's relative cost only grows with the batch,
    so batch 16 starts from off instead of running the tie on 16 rows until it is judged (the
    20-step p99 ITL of issue 32). At 16 ms K = 1 keeps 4% more, and batch 16 starts there.
    What batch 12 lends is published when it changes (here its decision did not: K = 1 came
    first and off never beat it by the hysteresis)."""
    assert _first_k_at_16(0.0165) == (1, 0)
    assert _first_k_at_16(0.016) == (1, 1)


def _batch_1_step(k: int, kept: int) -> StepTelemetry:
    """A step of one row that kept `kept` of its K drafts, at the demo pair's step times on a
    loaded 2-core machine (7.8 ms plain, 8 ms + 3.5 ms a draft token drafting)."""
    seconds = 0.0078 if k == 0 else 0.008 + 0.0035 * k
    return _step(1, k, seconds, tuple(int(kept >= j) for j in range(1, k + 1)))


def _kept(k: int, rng: np.random.Generator) -> int:
    """How many of K drafts one row keeps, each kept with probability 0.6 after the one before."""
    kept = 0
    while kept < k and rng.random() < 0.6:
        kept += 1
    return kept


def test_a_few_unlucky_rows_at_batch_1_do_not_hold_the_cell_at_off() -> None:
    """Each draft is kept with probability 0.6, so K = 1 keeps 9% more than off (K = 2: 2%);
    but the first seven rows drafted keep one draft between them (as a real run's first request
    did). Off is then decided, and a step at off measures no draft: the first drafting arm
    keeps what its first draft may yet keep, and is run again until the rows say which is
    better. Over 30 seeds, most end drafting; some end at off again, where the rows drawn after
    the start read unlucky too. Without that hope (K = 1 judged on its 4 steps) the cell ran
    off to the end in every seed (the power check, run by hand on the commit before it)."""
    held = []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        controller, drafted, ran = Controller("m", "h"), 0, []
        for _ in range(60):
            k = controller.live.k_for(1, 300)
            if k:
                drafted += 1
                kept = int(drafted == 7) if drafted <= 7 else _kept(k, rng)
            else:
                kept = 0
            ran.append(k)
            assert controller.ingest(_batch_1_step(k, kept))
        assert ran[:10].count(0) >= 1  # off was tried, and decided on the unlucky rows
        held.append(ran[-20:].count(0) <= 5)
    assert sum(held) >= 16  # 22 of 30 here; without the hope, 0 of 30
