"""`adaptivespec bench fleet`: N hosts' controllers learn together through one database.

Each host runs the `bench control` simulator scenario with its own controller (its own bandit
seed), a real tally, and real flushes and refreshes against the database, on its own virtual
clock: the host whose clock is behind steps next, and it flushes and refreshes on its clock at
the daemon's cadence (`SyncCadence`: every `--learning-sync-seconds` while a cell it steps has
fewer than `--young-cell-steps` in the fleet, else every `--flush-seconds` and
`--refresh-seconds`). Every host says it is live before its first step, as a daemon's start
does, so hosts that start together split the probes of new cells (`ProbeShare`).

`--stagger` places the hosts on the schedule:
- `rotate` (the default): out of phase, host h starts 1/N of the way through it and wraps
  around, as hosts behind one load balancer sit at different load levels at any moment;
- `none`: in step, each load level starting at the same virtual second on every host, as a
  change of traffic reaches every host behind a balancer at once. A host that served the
  level's steps sooner idles until the others have; otherwise hosts would drift apart by
  hundreds of steps within a few levels, and only the first level would be met together;
- `join`: host h starts at h/N of a lone host's run, in the same order: a fleet that grows
  while it serves, where each new host finds what the earlier ones measured.

Each host serves its own requests, with its own acceptance draws (`SimLoop.for_host`), as
hosts behind a balancer do, and is measured against its own oracle: the best fixed K per
bucket on its requests. Were every host given the same draws, the pooled evidence would count
one host's luck once per host: four hosts' unlucky first rows at batch 1 read as four times the
evidence and ruled out the larger K there, and, inherited, at larger batches too.

The lone host h is host h's controller without the database, on host h's requests, over the
same schedule order.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from adaptivespec.bench.arguments import integers
from adaptivespec.bench.control import sim_scenario
from adaptivespec.bench.fleet_report import print_run, print_summary, summarise_seeds
from adaptivespec.bench.learning_metrics import WINDOW, steps_to_match
from adaptivespec.bench.oracle import ORACLE_ARMS, Oracle, oracle_from_sweep, ratio_to_oracle, summarise
from adaptivespec.controller.buckets import BATCH_BUCKETS, batch_bucket
from adaptivespec.controller.controller import Controller, ControllerConfig
from adaptivespec.controller.fleet import Tally, fold
from adaptivespec.controller.policy import FixedK
from adaptivespec.controller.sync_cadence import SyncCadence
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.errors import ConfigError
from adaptivespec.sim import specs
from adaptivespec.sim.loop import PhaseResult, SimLoop
from adaptivespec.store.fleet import FleetKey, FleetRepository
from adaptivespec.store.repository import Store


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fleet = kinds.add_parser("fleet", help="N hosts learning through one database, against one alone")
    fleet.add_argument("--hosts", type=int, default=4)
    fleet.add_argument("--db", required=True, help="SQLAlchemy URL the hosts share")
    where = fleet.add_mutually_exclusive_group()
    where.add_argument("--hardware", help=f"preset: {', '.join(specs.HARDWARE_PRESETS)}")
    where.add_argument("--hardware-spec", type=Path, help="JSON file with the HardwareSpec keys")
    fleet.add_argument("--target", required=True, help=f"{', '.join(specs.MODEL_PRESETS)} or FILE.json")
    fleet.add_argument("--draft", required=True, help="a preset or FILE.json")
    load = fleet.add_mutually_exclusive_group()
    load.add_argument("--acceptance", type=float, help="mean acceptance rate (default 0.7)")
    load.add_argument("--workload", type=Path, help="workload JSON file")
    fleet.add_argument("--steps-per-bucket", type=int, default=None, help="default 2000")
    seeds = fleet.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, default=0)
    seeds.add_argument(
        "--seeds",
        type=integers,
        default=None,
        help="run at each of these seeds, and judge the bar on the means (e.g. 0,1,2,3,4,5)",
    )
    steady = SyncCadence()
    fleet.add_argument(
        "--flush-seconds", type=float, default=steady.flush_seconds, help="virtual seconds between flushes"
    )
    fleet.add_argument(
        "--refresh-seconds", type=float, default=steady.refresh_seconds, help="virtual s between refreshes"
    )
    fleet.add_argument(
        "--learning-sync-seconds",
        type=float,
        default=steady.young_seconds,
        help="virtual seconds between flushes and refreshes while a cell is young",
    )
    fleet.add_argument(
        "--young-cell-steps",
        type=int,
        default=steady.young_steps,
        help="fleet steps under which a cell is young (0: never sync fast)",
    )
    fleet.add_argument(
        "--stagger",
        choices=("rotate", "none", "join"),
        default="rotate",
        help="rotate: hosts at different load levels; none: each level reaches every host at once; "
        "join: hosts start one after another",
    )
    fleet.add_argument(
        "--window", type=int, default=WINDOW, help=f"steps of rolling goodput (default {WINDOW})"
    )
    fleet.add_argument("--json", type=Path, default=None)


@dataclass(slots=True)
class _Host:
    index: int
    controller: Controller
    order: list[int]
    key: FleetKey
    results: list[PhaseResult] = field(default_factory=list)
    clock: float = 0.0  # virtual seconds of decode steps
    next_tick: float = 0.0
    last_flush: float | None = None
    last_refresh: float | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(slots=True)
class _Database:
    """What the hosts' flushes and refreshes cost, in wall time, and how many rows they wrote."""

    flush_ms: list[float] = field(default_factory=list)
    refresh_ms: list[float] = field(default_factory=list)
    rows: int = 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.hosts < 1:
        raise ConfigError("--hosts must be >= 1")
    if args.window < 1:
        raise ConfigError("--window must be >= 1 step")
    if args.seeds is not None and (len(args.seeds) < 2 or len(set(args.seeds)) < len(args.seeds)):
        raise ConfigError("--seeds needs two or more different seeds, each once, e.g. --seeds 0,1,2,3")
    cadence = SyncCadence(
        args.flush_seconds, args.refresh_seconds, args.learning_sync_seconds, args.young_cell_steps
    )
    if args.seeds is None:
        report = _run_seed(args, cadence)
        print_run(report)
    else:
        reports = []
        for index, seed in enumerate(args.seeds):
            print(f"seed {seed} ({index + 1} of {len(args.seeds)})", flush=True)
            reports.append(_run_seed(argparse.Namespace(**{**vars(args), "seed": seed}), cadence))
            print_run(reports[-1])
        report = summarise_seeds(reports)
        print_summary(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return report


def _run_seed(args: argparse.Namespace, cadence: SyncCadence) -> dict[str, Any]:
    loop, workload, scenario, _ = sim_scenario(args)
    phases = len(workload.load)
    orders = [_order(h, args.hosts, phases, args.stagger) for h in range(args.hosts)]
    loops = [loop.for_host(h) for h in range(args.hosts)]
    total = (len(ORACLE_ARMS) + 2) * args.hosts * workload.total_steps
    with tqdm(total=total, desc="bench fleet", unit="step", file=sys.stderr) as bar:
        oracles = [_oracle(host_loop, bar) for host_loop in loops]
        lone = [_lone(loops[h], h, orders[h], bar) for h in range(args.hosts)]
        joins = args.stagger == "join"
        starts = [h * lone[0].clock / args.hosts if joins else 0.0 for h in range(args.hosts)]
        run_key = f"{loop.model_key} (bench fleet {uuid.uuid4().hex[:8]})"
        store = Store(args.db)
        try:
            repository = FleetRepository(store.engine)
            plan = list(zip(orders, starts, strict=True))
            together = args.stagger == "none"
            fleet, database, seconds = _fleet(
                loops, cadence, run_key, repository, bar, plan=plan, together=together
            )
        finally:
            store.close()
    report = {
        "hosts": args.hosts,
        "scenario": scenario,
        "run_key": run_key,
        "stagger": args.stagger,
        "flush_seconds": args.flush_seconds,
        "refresh_seconds": args.refresh_seconds,
        "learning_sync_seconds": args.learning_sync_seconds,
        "young_cell_steps": args.young_cell_steps,
        "window": args.window,
        "levels": [phase.concurrency for phase in workload.load],  # the load levels, in order
        **_learning(lone, fleet, oracles, args.window),
        **_database_costs(database, seconds),
    }
    return report


@dataclass(frozen=True, slots=True)
class _HostOracle:
    """The best fixed K per bucket on one host's requests, and its per-step goodput there."""

    oracle: Oracle
    targets: list[np.ndarray]  # per load level, in the workload's order: [steps] tokens / s


def _oracle(loop: SimLoop, bar: tqdm[Any]) -> _HostOracle:
    sweep = {k: loop.run(FixedK(k), progress=bar.update) for k in ORACLE_ARMS}
    oracle = oracle_from_sweep(sweep)
    return _HostOracle(oracle, _targets(sweep, oracle, loop))


def _learning(
    lone: list[_Host], fleet: list[_Host], oracles: list[_HostOracle], window: int
) -> dict[str, Any]:
    """Each host, lone or in the fleet, against the oracle on its own requests."""
    lone_levels = [_steps_by_level(h.results, h.order, oracles[h.index].targets, window) for h in lone]
    fleet_levels = [_steps_by_level(h.results, h.order, oracles[h.index].targets, window) for h in fleet]
    lone_steps = [float(sum(levels)) for levels in lone_levels]
    fleet_steps = [float(sum(levels)) for levels in fleet_levels]
    fleet_ratios = [ratio_to_oracle(summarise(h.results), oracles[h.index].oracle) for h in fleet]
    return {
        "lone": {
            "steps_to_095": lone_steps[0],
            "ratio_to_oracle": ratio_to_oracle(summarise(lone[0].results), oracles[0].oracle),
        },
        "lone_per_host": {"steps_to_095": lone_steps, "steps_to_095_by_level": lone_levels},
        "fleet": {
            "steps_to_095_per_host": fleet_steps,
            "steps_to_095_by_level": fleet_levels,
            "ratio_to_oracle": float(np.mean(fleet_ratios)),
            "ratio_per_host": fleet_ratios,
        },
        "holds": all(f <= 0.5 * lone_steps[0] for f in fleet_steps),
        # One lone run is one controller seed's luck (at a 10-step window, 12 to 61 steps over
        # four seeds of one scenario); the mean of a lone run per host is a steadier yardstick.
        "holds_against_lone_mean": all(f <= 0.5 * float(np.mean(lone_steps)) for f in fleet_steps),
    }


def _database_costs(database: _Database, seconds: float) -> dict[str, Any]:
    refresh = database.refresh_ms or [0.0]
    return {
        "db_writes_per_s": len(database.flush_ms) / seconds,
        "db_rows_per_s": database.rows / seconds,
        "flush_latency_ms": _latency(database.flush_ms),
        "refresh_latency_ms": float(np.mean(refresh)),
        "refresh_latency_p99_ms": float(np.percentile(refresh, 99)),
    }


def _order(host: int, hosts: int, phases: int, stagger: str) -> list[int]:
    offset = round(host * phases / hosts) if stagger == "rotate" else 0  # "join" staggers in time
    return [(i + offset) % phases for i in range(phases)]


def _targets(sweep: dict[int, list[PhaseResult]], oracle: Oracle, loop: SimLoop) -> list[np.ndarray]:
    """The oracle's per-step goodput in each phase, which `bench control` measures learners against."""
    targets = []
    for index, phase in enumerate(loop.workload.load):
        label = BATCH_BUCKETS[batch_bucket(phase.concurrency)].label
        targets.append(np.asarray(sweep[oracle.k_by_bucket[label]][index].goodput_trace))
    return targets


def _steps_by_level(
    results: list[PhaseResult], order: list[int], targets: list[np.ndarray], window: int
) -> list[int]:
    """Steps until the rolling goodput first reaches its target, per load level in the
    workload's order, whatever order the host met them in: where a host's steps went."""
    steps = [0] * len(targets)
    for result, index in zip(results, order, strict=True):
        steps[index] = steps_to_match(np.asarray(result.goodput_trace), targets[index], window=window)
    return steps


def _lone(loop: SimLoop, index: int, order: list[int], bar: tqdm[Any]) -> _Host:
    controller = Controller(loop.model_key, loop.hardware_key, ControllerConfig(seed=index))
    host = _Host(index, controller, order, FleetKey(f"lone-{index}", loop.model_key, loop.hardware_key))
    host.results = loop.run(host.controller.live, _clocked(host), bar.update, order)
    return host


def _fleet(
    loops: list[SimLoop],
    cadence: SyncCadence,
    run_key: str,
    repository: FleetRepository,
    bar: tqdm[Any],
    *,
    plan: list[tuple[list[int], float]],
    together: bool,
) -> tuple[list[_Host], _Database, float]:
    """`loops`: each host's requests; `plan`: each host's phase order and the virtual second it
    starts at; `together`: every phase starts on all hosts at once."""
    database = _Database()
    hosts = []
    loop = loops[0]
    for h, (order, start) in enumerate(plan):
        controller = Controller(run_key, loop.hardware_key, ControllerConfig(seed=h))
        host = _Host(h, controller, order, FleetKey(f"bench-host-{h}", run_key, loop.hardware_key))
        host.clock = host.next_tick = start
        controller.tally = Tally(repository.own(host.key))
        hosts.append(host)
    for host in hosts:  # each daemon says it is live before its first step (`FleetSync.start`)
        _flush(host, repository, database)
    for host in hosts:
        _refresh(host, repository, database, cadence)
    steppers = {
        h.index: loops[h.index].stepping(h.controller.live, h.results, _clocked(h), None, h.order)
        for h in hosts
    }
    queue = [(h.clock, h.index) for h in hosts]
    waiting: list[_Host] = []  # done with their phase, until every host is
    while queue:
        _, index = heapq.heappop(queue)
        host = hosts[index]
        if next(steppers[index], StopIteration) is not StopIteration:
            bar.update(1)
            _sync(host, repository, database, cadence)
            if together and _phase_done(host, loop):
                waiting.append(host)
            else:
                heapq.heappush(queue, (host.clock, index))
        if waiting and not queue:  # the next load level reaches every host at the same second
            start = max(h.clock for h in waiting)
            for waiter in waiting:
                waiter.clock = start
                heapq.heappush(queue, (start, waiter.index))
            waiting = []
    for host in hosts:  # the last totals, as a daemon's shutdown flush writes them
        _flush(host, repository, database)
    return hosts, database, max(h.clock for h in hosts)


def _phase_done(host: _Host, loop: SimLoop) -> bool:
    current = len(host.results) - 1
    return host.results[current].steps == loop.workload.load[host.order[current]].steps


def _clocked(host: _Host) -> Callable[[StepTelemetry], None]:
    def on_step(record: StepTelemetry) -> None:
        host.clock += record.step_seconds
        host.controller.ingest(record)

    return on_step


def _sync(host: _Host, repository: FleetRepository, database: _Database, cadence: SyncCadence) -> None:
    """What `FleetSync.sync` does every tick, on the host's virtual clock."""
    if host.clock < host.next_tick:
        return
    host.next_tick = host.clock + cadence.tick_seconds
    due = cadence.due(host.controller, host.clock, host.last_flush, host.last_refresh)
    if due.flush:
        _flush(host, repository, database)
        host.last_flush = host.clock
    if due.refresh:
        _refresh(host, repository, database, cadence)


def _refresh(host: _Host, repository: FleetRepository, database: _Database, cadence: SyncCadence) -> None:
    began = time.perf_counter()
    fold(host.controller, repository.pooled(host.key, cadence.live_seconds))
    database.refresh_ms.append((time.perf_counter() - began) * 1000)
    host.last_refresh = host.clock


def _flush(host: _Host, repository: FleetRepository, database: _Database) -> None:
    tally = host.controller.tally
    if tally is None:
        return
    began = time.perf_counter()
    database.rows += repository.flush(host.key, tally.take_changes(), tally.all_steps, host.started_at)
    database.flush_ms.append((time.perf_counter() - began) * 1000)


def _latency(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"mean": 0.0, "p99": 0.0}
    return {"mean": float(np.mean(samples)), "p99": float(np.percentile(samples, 99))}
