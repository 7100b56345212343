from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptivespec.cli import main

from .conftest import TinyPair


def _args(pair: TinyPair, *extra: str) -> list[str]:
    return ["generate", "--target", str(pair.target), "--draft", str(pair.draft), "--device", "cpu", *extra]


def test_generate_json_keeps_input_order(
    tiny_pair: TinyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def add\nfor i in range(10):\nclass Point:\n")
    assert (
        main(_args(tiny_pair, "--prompts-file", str(prompts), "--max-tokens", "8", "--k", "3", "--json")) == 0
    )
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["prompt"] for r in records] == ["def add", "for i in range(10):", "class Point:"]
    for record in records:
        assert {"text", "token_ids", "finish_reason", "steps", "drafted", "accepted"} <= record.keys()
        assert 1 <= len(record["token_ids"]) <= 8
        assert record["accepted"] <= record["drafted"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompt", "def", "--max-tokens", "0"], "max_tokens must be a positive integer"),
        (["--prompt", "def", "--temperature", "-1"], "temperature must be"),
        (["--prompt", ""], "prompt is empty"),
        (["--prompts-file", "/nonexistent/prompts.txt"], "does not exist"),
    ],
)
def test_generate_names_the_problem(
    tiny_pair: TinyPair, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_args(tiny_pair, *extra)) == 2
    assert message in capsys.readouterr().err


def test_unknown_model_says_what_to_do(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    assert (
        main(["generate", "--prompt", "x", "--target", missing, "--proposer", "ngram", "--device", "cpu"])
        == 2
    )
    assert "cannot load" in capsys.readouterr().err


def test_the_command_line_starts_without_torch_the_database_or_bench() -> None:
    """What keeps `--help` instant: building the parser imports none of the heavy parts."""
    import subprocess
    import sys

    probe = (
        "import sys; from adaptivespec.cli import _parser; _parser(); "
        "heavy = [m for m in ('torch', 'sqlalchemy', 'alembic', 'transformers', 'adaptivespec.bench') "
        "if m in sys.modules]; print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_version_and_flags_after_the_subcommand(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.startswith("adaptivespec ")
    missing = f"sqlite:///{tmp_path}/none.db"
    for argv in (
        ["thresholds", "--db", missing, "--log-level", "debug"],
        ["--log-level", "debug", "thresholds", "--db", missing],
        ["thresholds", "-v", "--db", missing],
    ):
        assert main(argv) == 2  # parsed, then refused for the missing database
        assert "no database" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "workload" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "serve" in capsys.readouterr().out
