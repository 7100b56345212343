"""`adaptivespec thresholds [--export ...]`, `db upgrade|current` and `fleet status`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from adaptivespec.controller import exports, single_drafter
from adaptivespec.controller.buckets import CONTEXT_BUCKETS, Bucket
from adaptivespec.controller.exports import ExportError, KTable
from adaptivespec.controller.single_drafter import LearnedRow
from adaptivespec.store.db import StoreError, current_revision, make_engine, sqlite_path, upgrade
from adaptivespec.store.fleet import FleetRepository
from adaptivespec.store.integrity import damaged, sqlite_problems
from adaptivespec.store.pooled_view import pooled_thresholds
from adaptivespec.store.repository import Store
from adaptivespec.store.rows import ThresholdRow


@dataclass(frozen=True, slots=True)
class Exportable:
    """Tables to export, per context bucket, all running one drafter."""

    tables: list[KTable]
    model_key: str | None
    drafter: str | None = None  # None: the model key's only one
    notes: list[str] = field(default_factory=list)  # what choosing one drafter dropped


def run(args: argparse.Namespace) -> None:
    """The command `command_args.register` declared: thresholds, fleet or db."""
    {"thresholds": run_thresholds, "fleet": run_fleet, "db": run_db}[args.command](args)


def run_thresholds(args: argparse.Namespace) -> None:
    if args.source is not None:
        _export(args, _table_of_report(args.source))
        return
    store = Store(args.db, migrate=False)  # it only reads: never migrates what a daemon owns
    try:
        rows = _learned(store)
    finally:
        store.close()
    if args.export is not None:
        _export(args, _tables_of_rows(args, rows))
        return
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return
    if not rows:
        print("nothing learned yet in this database")
        return
    for r in rows:
        print(f"{r.model_key} on {r.hardware_key}, context {r.ctx_bucket}:")
        threshold = r.threshold if r.threshold is not None else "none (speculation paid at every batch seen)"
        print(f"  threshold: {threshold}")
        print(f"  K by batch bucket: {r.k_by_bucket}")
        if any(r.method_by_bucket.values()):
            print(f"  drafter by batch bucket: {r.method_by_bucket}")
        print(f"  samples {r.samples}, confidence {r.confidence:.2f}, policy version {r.policy_version}")
        print(f"  updated {r.updated_at}")


def _learned(store: Store) -> list[ThresholdRow]:
    """The decisions each (model, hardware) holds; where a fleet pooled into this database,
    what the whole fleet learned (hosts of a fleet keep their statistics in the fleet tables)."""
    pooled = pooled_thresholds(store.engine)
    fleet_keys = {(r.model_key, r.hardware_key) for r in pooled}
    alone = [r for r in store.thresholds() if (r.model_key, r.hardware_key) not in fleet_keys]
    return alone + pooled


def run_db(args: argparse.Namespace) -> None:
    if args.action == "check":
        _check(args.db)
        return
    engine = make_engine(args.db)
    try:
        if args.action == "upgrade":
            print(f"schema at revision {upgrade(engine)}")
        else:
            print(f"schema at revision {current_revision(engine)}")
    finally:
        engine.dispose()


def _check(url: str | None) -> None:
    """`db check`: SQLite's full integrity_check, read-only; every problem is printed."""
    path = sqlite_path(url)
    if path is None:
        print("nothing to check here: PostgreSQL checks its own pages (see its amcheck extension)")
        return
    if not path.is_file():
        raise StoreError(f"no database at {path}; point --db at the daemon's database")
    problems = sqlite_problems(path, full=True)
    if problems:
        for problem in problems:
            print(problem)
        raise damaged(path, problems, f"sqlite:///{path}")
    print(f"ok: {path} passed SQLite's integrity_check")


def run_fleet(args: argparse.Namespace) -> None:
    store = Store(args.db, migrate=False)
    try:
        hosts = FleetRepository(store.engine).hosts()
    finally:
        store.close()
    if args.json:
        print(json.dumps([asdict(h) for h in hosts], indent=2))
        return
    if not hosts:
        print("no host has flushed to this database (serve with --fleet on, or on PostgreSQL)")
        return
    print(f"{'host':<24} {'steps':>10}  {'last flush (UTC)':<26} model on hardware")
    for h in hosts:
        print(f"{h.host_id:<24} {h.steps:>10}  {h.last_flush_at[:26]:<26} {h.model_key} on {h.hardware_key}")
    per_key: dict[tuple[str, str], list[int]] = {}
    for h in hosts:
        per_key.setdefault((h.model_key, h.hardware_key), []).append(h.steps)
    for (model, hardware), steps in per_key.items():
        hosts_word = "host" if len(steps) == 1 else "hosts"
        print(f"{model} on {hardware}: {len(steps)} {hosts_word}, {sum(steps)} steps")


def _table_of_report(path: Path) -> Exportable:
    try:
        report = json.loads(path.read_text())
        k_by_bucket = report["policies"]["adaptive"]["k_by_bucket"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"{path} is not a `bench control` JSON report ({exc})") from exc
    whole = Bucket(1, CONTEXT_BUCKETS[-1].hi)  # the simulator has no context axis
    scenario = report.get("scenario")
    model_key = scenario.get("model_key") if isinstance(scenario, dict) else None
    return Exportable(
        [KTable.from_labels(whole, k_by_bucket)], model_key if isinstance(model_key, str) else None
    )


def _tables_of_rows(args: argparse.Namespace, rows: list[ThresholdRow]) -> Exportable:
    chosen = [
        r
        for r in rows
        if (args.model_key is None or r.model_key == args.model_key)
        and (args.hardware_key is None or r.hardware_key == args.hardware_key)
    ]
    keys = sorted({(r.model_key, r.hardware_key) for r in chosen})
    if not keys:
        raise ExportError("nothing learned in this database for that model and hardware yet")
    if len(keys) > 1:
        listed = "; ".join(f"--model-key {m!r} --hardware-key {h!r}" for m, h in keys)
        raise ExportError(f"the database holds several tables; pick one: {listed}")
    learned = [LearnedRow(r.k_by_bucket, r.method_by_bucket, _options(r)) for r in chosen]
    drafter, k_tables, notes = single_drafter.one_drafter(learned)
    tables = [
        KTable.from_labels(exports.context_bucket_named(r.ctx_bucket), table)
        for r, table in zip(chosen, k_tables, strict=True)
    ]
    return Exportable(tables, keys[0][0], drafter, notes)


def _options(row: ThresholdRow) -> dict[str, dict[str, single_drafter.Option]]:
    return {
        label: {method: (int(k), float(goodput)) for method, (k, goodput) in options.items()}
        for label, options in row.method_options.items()
    }


def _export(args: argparse.Namespace, learned: Exportable) -> None:
    fmt = args.export or "vllm"
    tables, model_key, drafter = learned.tables, learned.model_key, learned.drafter
    if args.with_context:
        if fmt != "vllm":
            raise ExportError("--with-context is the vLLM five-item form; use it with --export vllm")
        config, notes = exports.vllm_with_context(tables, model_key, drafter)
        _print(config, learned.notes + notes)
        return
    table = _one_context(args, tables)
    if fmt == "vllm":
        config, notes = exports.vllm(table, model_key, args.vllm_field, drafter)
    elif fmt == "trtllm":
        config, notes = exports.trtllm(table)
    else:
        config, notes = exports.sglang(table)
    _print(config, learned.notes + notes)


def _print(config: dict[str, object], notes: list[str]) -> None:
    for note in notes:
        print(f"adaptivespec: note: {note}", file=sys.stderr)
    print(json.dumps(config))


def _one_context(args: argparse.Namespace, tables: list[KTable]) -> KTable:
    if args.ctx_bucket is None:
        return min(tables, key=lambda t: t.ctx.lo)
    wanted = exports.context_bucket_named(args.ctx_bucket)
    for table in tables:
        if table.ctx == wanted:
            return table
    have = ", ".join(t.ctx.label for t in tables)
    raise ExportError(f"nothing learned for context bucket {args.ctx_bucket}; learned: {have}")
