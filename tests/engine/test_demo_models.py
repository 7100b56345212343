"""Smoke test of the demo-pair recipe at a reduced budget: corpus, tokenizer, joint training, cache."""

from __future__ import annotations

from pathlib import Path

from adaptivespec.engine.demo_models import DemoRecipe, ModelSize, ensure_demo_pair
from adaptivespec.engine.loader import load_tokenizer

SMOKE = DemoRecipe(
    vocab_size=512,
    corpus_bytes=300_000,
    target=ModelSize(64, 2, 4, 2, 128),
    draft=ModelSize(32, 1, 2, 1, 64),
    seq_len=32,
    batch=8,
    steps=40,
    eval_tokens=2048,
)


def test_recipe_builds_caches_and_reports(tmp_path: Path) -> None:
    pair = ensure_demo_pair(SMOKE, root=tmp_path, progress=False)
    assert pair.target.parent.name == SMOKE.key
    assert {"agreement", "target_loss", "draft_loss", "build_seconds"} <= pair.report.keys()
    assert 0.0 <= pair.report["agreement"] <= 1.0
    assert pair.report["target_params"] > pair.report["draft_params"]
    tokenizer = load_tokenizer(str(pair.target))
    assert tokenizer.decode(tokenizer.encode("def f(x):\n    return x")) == "def f(x):\n    return x"
    stamp = (pair.target.parent / "report.json").stat().st_mtime_ns
    again = ensure_demo_pair(SMOKE, root=tmp_path, progress=False)
    assert again.report == pair.report
    assert (pair.target.parent / "report.json").stat().st_mtime_ns == stamp  # cached, not rebuilt


def test_recipe_is_deterministic(tmp_path: Path) -> None:
    first = ensure_demo_pair(SMOKE, root=tmp_path / "a", progress=False)
    second = ensure_demo_pair(SMOKE, root=tmp_path / "b", progress=False)
    assert first.report["target_loss"] == second.report["target_loss"]
    assert first.report["agreement"] == second.report["agreement"]
