"""A bench flag given a value it cannot run is refused by name, before anything loads."""

from __future__ import annotations

import pytest

from adaptivespec.cli import main

REFUSED = [
    ("drafters", "--k", "0"),  # K = 0 is off, which `--drafters off` names
    ("drafters", "--k", "4,-1"),
    ("copy-ceiling", "--k", "0"),
    ("engine", "--batches", "8,0"),
    ("off-cost", "--batches", "0"),
    ("variants", "--batches", "-8"),
    ("variants", "--ks", "-1"),
    ("steps", "--batches", "0"),
    ("steps", "--ks", "4,-2"),
    ("cache", "--contexts", "0"),
    ("workload", "--k", "0"),
]


@pytest.mark.parametrize(("bench", "flag", "value"), REFUSED)
def test_a_value_a_bench_cannot_run_is_an_error_that_names_its_flag(
    bench: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", bench, flag, value])
    assert exited.value.code == 2  # argparse's usage error: nothing ran
    error = capsys.readouterr().err
    assert flag in error and f">= {0 if flag == '--ks' else 1}" in error and value in error


def test_k_zero_stays_a_sweep_point_where_off_is_one_of_the_arms() -> None:
    import argparse

    from adaptivespec.bench import commands

    args = commands.parser(argparse.ArgumentParser(add_help=False)).parse_args(["steps", "--ks", "0,2"])
    assert args.ks == [0, 2]
