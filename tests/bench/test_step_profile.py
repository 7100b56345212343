"""`bench profile` on the tiny pair: the report's shape, never its timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptivespec.cli import main

from ..conftest import TinyPair


def _args(pair: TinyPair, *extra: str) -> list[str]:
    model = [
        "--target",
        str(pair.target),
        "--draft",
        str(pair.draft),
        "--device",
        "cpu",
        "--dtype",
        "float32",
    ]
    return ["bench", "profile", *model, "--context", "12", "--steps", "3", *extra]


def test_the_profile_lists_the_costliest_operators_first(tiny_pair: TinyPair, tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    assert main([*_args(tiny_pair, "--batch", "2", "--k", "2", "--top", "5"), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (report["batch"], report["k"], report["context"]) == (2, 2, 12)
    assert report["step_ms"] > 0
    operators = report["operators"]
    assert len(operators) == 5
    shares = [op["share"] for op in operators]
    assert shares == sorted(shares, reverse=True)
    assert 0 < sum(shares) <= 1 + 1e-9
    assert all(op["ms_per_step"] > 0 for op in operators)


def test_a_batch_of_zero_is_refused_by_name(tiny_pair: TinyPair) -> None:
    with pytest.raises(SystemExit, match="--batch must be at least 1"):
        main(_args(tiny_pair, "--batch", "0"))
