"""`adaptivespec bench fleet`: N hosts' controllers learn together through one database.

Each host runs the `bench control` simulator scenario with its own controller, a real tally,
and real flushes and refreshes against the database, on its own virtual clock: the host whose
clock is behind steps next, and it flushes and refreshes on its clock at the daemon's cadence
(`SyncCadence`: every `--learning-sync-seconds` while a cell it steps has fewer than
`--young-cell-steps` in the fleet, else every `--flush-seconds` and `--refresh-seconds`). Every
host says it is live before its first step, as a daemon's start does, so hosts that start
together split the probes of new cells (`ProbeShare`).

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
import functools
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from adaptivespec.bench.arguments import integers
from adaptivespec.bench.control import sim_scenario
from adaptivespec.bench.fleet_hosts import FleetRun, Host, VirtualTime, clocked
from adaptivespec.bench.fleet_report import (
    HostOracle,
    database_costs,
    learning,
    print_run,
    print_summary,
    summarise_seeds,
)
from adaptivespec.bench.learning_metrics import WINDOW
from adaptivespec.bench.oracle import ORACLE_ARMS, Oracle, oracle_from_sweep
from adaptivespec.controller.buckets import BATCH_BUCKETS, batch_bucket
from adaptivespec.controller.controller import Controller, ControllerConfig
from adaptivespec.controller.fleet import Tally
from adaptivespec.controller.sync_cadence import SyncCadence
from adaptivespec.engine.static_policy import FixedK
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
    fleet.add_argument(
        "--db-latency-ms",
        type=float,
        default=2.0,
        help="virtual milliseconds each database call takes each way (default 2)",
    )
    fleet.add_argument("--json", type=Path, default=None)


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
            clock = VirtualTime()
            repository = FleetRepository(store.engine, now=clock.now)
            together = functools.partial(_phase_done, loop=loop) if args.stagger == "none" else None
            run = FleetRun(repository, clock, cadence, args.db_latency_ms / 1000, together)
            plan = list(zip(orders, starts, strict=True))
            fleet, seconds = _fleet(loops, run, run_key, bar, plan)
            database = run.database
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
        "db_latency_ms": args.db_latency_ms,  # modelled, each way, on the virtual clock
        "window": args.window,
        "levels": [phase.concurrency for phase in workload.load],  # the load levels, in order
        **learning(lone, fleet, oracles, args.window),
        **database_costs(database, seconds),
    }
    return report


def _oracle(loop: SimLoop, bar: tqdm[Any]) -> HostOracle:
    sweep = {k: loop.run(FixedK(k), progress=bar.update) for k in ORACLE_ARMS}
    oracle = oracle_from_sweep(sweep)
    return HostOracle(oracle, _targets(sweep, oracle, loop))


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


def _lone(loop: SimLoop, index: int, order: list[int], bar: tqdm[Any]) -> Host:
    controller = Controller(loop.model_key, loop.hardware_key, ControllerConfig())
    host = Host(index, controller, order, FleetKey(f"lone-{index}", loop.model_key, loop.hardware_key))
    host.results = loop.run(host.controller.live, clocked(host), bar.update, order)
    return host


def _fleet(
    loops: list[SimLoop],
    run: FleetRun,
    run_key: str,
    bar: tqdm[Any],
    plan: list[tuple[list[int], float]],
) -> tuple[list[Host], float]:
    """`loops`: each host's requests; `plan`: each host's phase order and the virtual second it
    starts at."""
    hosts = []
    loop = loops[0]
    for h, (order, start) in enumerate(plan):
        controller = Controller(run_key, loop.hardware_key, ControllerConfig())
        host = Host(h, controller, order, FleetKey(f"bench-host-{h}", run_key, loop.hardware_key))
        host.clock = host.next_tick = start
        controller.pool(Tally(run.repository.own(host.key)))
        hosts.append(host)
    steppers = {
        h.index: loops[h.index].stepping(h.controller.live, h.results, clocked(h), None, h.order)
        for h in hosts
    }
    return hosts, run.run(hosts, steppers, bar.update)


def _phase_done(host: Host, loop: SimLoop) -> bool:
    current = len(host.results) - 1
    return host.results[current].steps == loop.workload.load[host.order[current]].steps
