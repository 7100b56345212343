"""`adaptivespec bench control --backend sim ...`: argument handling, progress and the JSON report."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from adaptivespec.bench import hf_control, learners
from adaptivespec.bench.background_load import BackgroundLoad
from adaptivespec.bench.control_report import learning, print_table, sample_efficiency
from adaptivespec.bench.hf_loop import HFLoop
from adaptivespec.bench.interleaved import Measurement, measure
from adaptivespec.bench.lineup import Lineup, lineup
from adaptivespec.bench.machine import machine
from adaptivespec.bench.machine_level import levelled
from adaptivespec.bench.oracle import (
    ORACLE_ARMS,
    Learner,
    baseline_policies,
    run_control,
)
from adaptivespec.bench.plot import goodput_by_batch
from adaptivespec.bench.steps import prompt_windows
from adaptivespec.bench.traffic_mixes import MIXES
from adaptivespec.bench.traffic_mixes import prompts as traffic_prompts
from adaptivespec.config import DEFAULT_MODEL, RUNTIMES, EngineConfig, ModelConfig
from adaptivespec.controller.buckets import BATCH_BUCKETS
from adaptivespec.controller.controller import Controller
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.loader import load_runner, load_tokenizer
from adaptivespec.engine.model_sources import resolve_models
from adaptivespec.errors import ConfigError
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import SimLoop
from adaptivespec.sim.workload import Workload, default_load
from adaptivespec.store.repository import Store


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    control = kinds.add_parser("control", help="every speculation policy against a per-bucket oracle")
    control.add_argument("--backend", choices=("sim", "hf"), required=True)
    where = control.add_mutually_exclusive_group()
    where.add_argument("--hardware", help=f"preset: {', '.join(specs.HARDWARE_PRESETS)}")
    where.add_argument("--hardware-spec", type=Path, help="JSON file with the HardwareSpec keys")
    targets = ", ".join(specs.MODEL_PRESETS)
    control.add_argument("--target", help=f"sim: a preset ({targets}) or FILE.json; hf: model dir or demo")
    control.add_argument("--draft", help="sim: a preset or FILE.json; hf: a draft model dir or 'demo'")
    load = control.add_mutually_exclusive_group()
    load.add_argument("--acceptance", type=float, help="mean acceptance rate (default 0.7)")
    load.add_argument("--workload", type=Path, help="workload JSON file")
    control.add_argument("--steps-per-bucket", type=int, default=None, help="default 2000 on sim, 60 on hf")
    control.add_argument("--new-tokens", type=int, default=128, help="hf: tokens each request generates")
    control.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="hf: segments per bucket and contender (default: steps / 10)",
    )
    control.add_argument("--max-batch", type=int, default=128, help="hf: the largest batch size measured")
    control.add_argument(
        "--quick", action="store_true", help="hf: a reduced run (batch <= 16, 20 steps per bucket), same keys"
    )
    control.add_argument("--seed", type=int, default=0)
    control.add_argument(
        "--traffic", choices=MIXES, default="chat", help="hf: the prompts' mix (traffic_mixes.py)"
    )
    control.add_argument(
        "--proposer", default="auto", help="hf: the drafters, comma-separated (auto: as serve loads them)"
    )
    control.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="torch",
        help="hf: what runs the target's forwards (default torch, as the controller rows in "
        "docs/results.md were measured; serve's default is auto)",
    )
    control.add_argument(
        "--background-load",
        type=int,
        default=0,
        metavar="N",
        help="hf: N busy single-threaded processes beside the contenders (a machine doing other work)",
    )
    control.add_argument(
        "--db", default=None, help="SQLAlchemy URL: the adaptive policy resumes from and saves to it"
    )
    control.add_argument("--json", type=Path, required=True)
    control.add_argument("--plot", type=Path, default=None)
    control.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="one JSON line per step of the adaptive policy (the arm it ran, the drafts it "
        "verified a row, its seconds and tokens, and its cell's decision after it)",
    )


def _model(value: str) -> specs.ModelSpec:
    if value.endswith(".json") or Path(value).is_file():
        return specs.load_spec(specs.ModelSpec, Path(value))
    return specs.model(value)


def _workload(args: argparse.Namespace) -> Workload:
    steps = 2000 if args.steps_per_bucket is None else args.steps_per_bucket
    if steps < 1:
        raise ConfigError("--steps-per-bucket must be >= 1")
    if args.workload is not None:
        return Workload.from_file(args.workload, steps)
    return Workload(
        acceptance_mean=0.7 if args.acceptance is None else args.acceptance, load=default_load(steps)
    )


def sim_scenario(args: argparse.Namespace) -> tuple[SimLoop, Workload, dict[str, Any], str]:
    """The simulator scenario the flags describe (`bench control` and `bench fleet` share them)."""
    if args.target is None or args.draft is None:
        raise ConfigError("--backend sim needs --target and --draft (presets or FILE.json)")
    hardware = specs.hardware(args.hardware, args.hardware_spec)
    target, draft = _model(args.target), _model(args.draft)
    workload = _workload(args)
    cost = StepCostModel(hardware, target, draft)
    loop = SimLoop(cost, workload, args.seed, f"{target.name}+{draft.name}:bf16", f"sim:{hardware.name}")
    scenario = {
        "backend": "sim",
        "hardware": asdict(hardware),
        "target": asdict(target),
        "draft": asdict(draft),
        "workload": _jsonable(asdict(workload)),
        "seed": args.seed,
    }
    title = f"{hardware.name}: {target.name} + {draft.name} draft, acceptance {workload.acceptance_mean}"
    return loop, workload, scenario, title


def _hf(args: argparse.Namespace) -> tuple[HFLoop, dict[str, Any], str]:
    # --quick: a run of minutes on 2 cores for the default model, with the same keys
    max_batch = min(args.max_batch, 16) if args.quick else args.max_batch
    steps = args.steps_per_bucket or (20 if args.quick else 60)
    repeats = args.repeats or max(1, steps // 10)
    if args.background_load < 0:
        raise ConfigError("--background-load must be >= 0")
    if steps < 1 or not 1 <= repeats <= steps:
        raise ConfigError("--steps-per-bucket must be >= 1 and --repeats in [1, steps per bucket]")
    models = ModelConfig(
        target=args.target or DEFAULT_MODEL,
        draft=args.draft,
        proposer=args.proposer,
        device="auto",
        runtime=args.runtime,
    )
    tokenizer = load_tokenizer(str(resolve_models(models, progress=False)[0].path))
    if args.traffic == "chat":
        prompts = prompt_windows(tokenizer, held_out_documents(), 256, 64)
    else:
        prompts = traffic_prompts(args.traffic, tokenizer, 256, args.seed)
    engine = EngineConfig(
        max_batch=max_batch,
        max_queued=max_batch,
        max_context=max(len(p) for p in prompts) + args.new_tokens + 16,
        threads=args.threads,
        models=models,
    )
    loaded = load_runner(engine)
    load = default_load(steps - steps % repeats, up_to=max_batch)
    loop = HFLoop(loaded.runner, prompts, args.new_tokens, load, args.seed)
    scenario = {
        "backend": "hf",
        "model_key": loaded.runner.model_key,
        "hardware_key": loaded.runner.hardware_key,
        **machine(loaded.runner.hardware_key),
        "traffic": args.traffic,
        "prompt_tokens": [min(len(p) for p in prompts), max(len(p) for p in prompts)],
        "new_tokens": args.new_tokens,
        "steps_per_bucket": steps - steps % repeats,
        "repeats": repeats,
        "seed": args.seed,
        "background_load": args.background_load,
    }
    return loop, scenario, f"{loaded.runner.hardware_key}: {loaded.runner.model_key}"


def _run_hf(args: argparse.Namespace) -> dict[str, Any]:
    loop, scenario, title = _hf(args)
    store = Store(args.db) if args.db else None
    with _trace(args) as trace:
        field = lineup(loop.model_key, loop.hardware_key, store, loop.runner.methods, trace)
        measurement = _measured(args, loop, field, scenario)
    if store is not None:
        learners.flush(field.controller, store)
        store.close()
    governor = loop.runner.threads
    if governor is not None:  # threads left to the engine: what it ran on at the end, and why
        scenario |= {"threads_at_end": governor.threads, "other_cores_busy_at_end": round(governor.others, 2)}
    at_pace = levelled(measurement)
    scenario["levelled"] = at_pace is not measurement  # figures at the machine's typical pace
    report = {"scenario": scenario} | hf_control.report(at_pace, field)
    report["unlevelled"] = _as_measured(hf_control.report(measurement, field))
    args.json.write_text(json.dumps(report, indent=2))
    print_table(report)
    if args.plot is not None:
        sizes = {b.label: b.hi for b in BATCH_BUCKETS}
        series = {name: r["goodput_by_bucket"] for name, r in report["policies"].items()}
        goodput_by_batch(args.plot, title, series, sizes)
    return report


def _trace(args: argparse.Namespace) -> AbstractContextManager[TextIO | None]:
    """The file `--trace` names, open for the adaptive policy's steps (None without one)."""
    return args.trace.open("w") if args.trace is not None else nullcontext()


def _measured(args: argparse.Namespace, loop: HFLoop, field: Lineup, scenario: dict[str, Any]) -> Measurement:
    """Every contender interleaved, beside the background load asked for, after the settle."""
    total = len(field.contenders) * sum(p.steps for p in loop.load)
    with (
        BackgroundLoad(args.background_load),
        tqdm(total=total, desc="bench control (interleaved)", unit="step", file=sys.stderr) as bar,
    ):
        scenario["settle_steps"] = loop.settle()
        return measure(loop, field.contenders, scenario["repeats"], bar.update)


def _as_measured(report: dict[str, Any]) -> dict[str, Any]:
    """The verdicts on the seconds as measured, beside the levelled ones."""
    return {
        "ratio_to_oracle": {name: p["ratio_to_oracle"] for name, p in report["policies"].items()},
        "comparisons": report["comparisons"],
        "same_configuration_spread": report["same_configuration_spread"],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.backend == "hf":
        return _run_hf(args)
    loop, workload, scenario, title = sim_scenario(args)
    policies = baseline_policies()
    store = Store(args.db) if args.db else None
    warm = store is not None and store.load(loop.model_key, loop.hardware_key) is not None
    controllers: list[Controller] = []

    def make_adaptive(trace: TextIO | None) -> Learner:
        controller, learner = learners.adaptive(loop.model_key, loop.hardware_key, store, trace=trace)
        controllers.append(controller)
        return learner

    runs = len(ORACLE_ARMS) + len(policies) + 2
    with (
        _trace(args) as trace,
        tqdm(total=runs * workload.total_steps, desc="bench control", unit="step", file=sys.stderr) as bar,
    ):
        oracle, reports, raw = run_control(
            loop,
            policies,
            progress=bar.update,
            learners={
                "adaptive": partial(make_adaptive, trace),
                "plain-ucb": learners.plain_ucb(ORACLE_ARMS),
            },
        )
    if store is not None:
        learners.flush(controllers[0], store)
        store.close()
    policy_reports: dict[str, dict[str, Any]] = {name: r.to_json() for name, r in reports.items()}
    policy_reports["adaptive"].update(learning(raw, workload, reports, warm))
    report = {
        "scenario": scenario,
        "buckets": list(oracle.k_by_bucket),
        "oracle": oracle.to_json(),
        "policies": policy_reports,
        "sample_efficiency": sample_efficiency(raw),
    }
    args.json.write_text(json.dumps(report, indent=2))
    print_table(report)
    if args.plot is not None:
        sizes = {b.label: b.hi for b in BATCH_BUCKETS}
        series = {name: r.goodput_by_bucket for name, r in reports.items()}
        goodput_by_batch(args.plot, title, series, sizes)
    return report


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
