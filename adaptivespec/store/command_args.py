"""The arguments of `adaptivespec thresholds`, `fleet` and `db`: declared without importing the
database or the controller, so that the command line starts at once (see store/commands.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from adaptivespec.controller.exports import FORMATS, VLLM_FIELDS

_DB_HELP = "SQLAlchemy URL (default: SQLite in the state directory)"


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]
) -> None:
    thresholds = commands.add_parser(
        "thresholds", help="what the controller learned, per model, hardware and context", parents=parents
    )
    thresholds.add_argument("--db", default=None, help=_DB_HELP)
    thresholds.add_argument("--json", action="store_true", help="a JSON list of objects")
    thresholds.add_argument(
        "--export", choices=FORMATS, help="print the table in that engine's own config format"
    )
    thresholds.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="export the adaptive policy's table of a `bench control` JSON",
    )
    thresholds.add_argument(
        "--ctx-bucket", help="the context bucket to export, e.g. 1-512 (default: the shortest)"
    )
    thresholds.add_argument(
        "--with-context", action="store_true", help="vllm: the five-item form over every context bucket"
    )
    thresholds.add_argument(
        "--vllm-field",
        choices=VLLM_FIELDS,
        default=VLLM_FIELDS[0],
        help="the schedule's field: vLLM main's (default) or vLLM 0.33.0's",
    )
    thresholds.add_argument("--model-key", help="export this model's table (when the database holds several)")
    thresholds.add_argument(
        "--hardware-key", help="export this hardware's table (when the database holds several)"
    )
    fleet = commands.add_parser("fleet", help="the hosts pooling in a database", parents=parents)
    fleet.add_argument("action", choices=("status",))
    fleet.add_argument("--db", default=None, help=_DB_HELP)
    fleet.add_argument("--json", action="store_true")
    db = commands.add_parser("db", help="database schema management", parents=parents)
    db.add_argument(
        "action",
        choices=("upgrade", "current", "check"),
        help="check: SQLite's full integrity check, read-only (the daemon runs a quick one at start)",
    )
    db.add_argument("--db", default=None, help=_DB_HELP)
