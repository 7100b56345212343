"""`adaptivespec thresholds` and `adaptivespec db upgrade|current`."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from adaptivespec.store.db import current_revision, default_url, make_engine, upgrade
from adaptivespec.store.repository import Store


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    thresholds = commands.add_parser(
        "thresholds", help="what the controller learned, per model, hardware and context"
    )
    thresholds.add_argument("--db", default=None, help=f"SQLAlchemy URL (default {default_url()})")
    thresholds.add_argument("--json", action="store_true", help="a JSON list of objects")
    db = commands.add_parser("db", help="database schema management")
    db.add_argument("action", choices=("upgrade", "current"))
    db.add_argument("--db", default=None, help=f"SQLAlchemy URL (default {default_url()})")


def run_thresholds(args: argparse.Namespace) -> None:
    store = Store(args.db, migrate=False)  # it only reads: never migrates what a daemon owns
    try:
        rows = store.thresholds()
    finally:
        store.close()
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
        print(f"  samples {r.samples}, confidence {r.confidence:.2f}, policy version {r.policy_version}")
        print(f"  updated {r.updated_at}")


def run_db(args: argparse.Namespace) -> None:
    engine = make_engine(args.db)
    try:
        if args.action == "upgrade":
            print(f"schema at revision {upgrade(engine)}")
        else:
            print(f"schema at revision {current_revision(engine)}")
    finally:
        engine.dispose()
