"""`bench off-cost`: a loaded drafter against a plain engine, step by step at K = 0."""

from __future__ import annotations

import json
from pathlib import Path

from adaptivespec.cli import main
from adaptivespec.engine.suffix_proposer import suffix_available

from ..conftest import TinyPair


def test_bench_off_cost_pairs_steps_and_reports_a_ratio_with_an_interval(
    tiny_pair: TinyPair, tmp_path: Path
) -> None:
    """Shape only: a tiny model's step times say nothing about a real one's."""
    out = tmp_path / "off.json"
    drafters = "ngram,draft,suffix" if suffix_available() else "ngram,draft"
    args = ["bench", "off-cost", "--target", str(tiny_pair.target), "--draft", str(tiny_pair.draft)]
    args += ["--drafters", drafters]
    assert main([*args, "--batches", "1,2", "--context", "16", "--steps", "6", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert "cpu_capability" in report["machine"] and report["scenario"]["steps"] == 6
    cases = report["cases"]
    assert [(c["batch"], c["drafter"]) for c in cases] == [
        (b, d) for b in (1, 2) for d in drafters.split(",")
    ]
    for case in cases:
        low, high = case["ratio_ci"]
        assert 0 < low <= case["ratio"] <= high and case["plain_ms"] > 0 and case["pairs"] == 6
