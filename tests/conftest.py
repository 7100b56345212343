"""Shared fixtures: a tiny real transformers model pair, saved to disk like any HF model.

Both are trained for a few seconds on a small corpus, so their greedy outputs vary and
agree only partly: enough to exercise both acceptance and rejection.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from adaptivespec.engine.demo_models import DemoRecipe, ModelSize, train_pair

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "import os\nimport sys\nprint(os.getcwd(), sys.argv)\n",
] * 20


@dataclass(frozen=True)
class TinyPair:
    target: Path
    draft: Path
    other_vocab_draft: Path


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> TinyPair:
    """Trains a tiny target and draft together for a few seconds with the demo recipe's loop."""
    root = tmp_path_factory.mktemp("tiny-pair")
    recipe = DemoRecipe(
        vocab_size=300,
        target=ModelSize(64, 2, 4, 2, 128),
        draft=ModelSize(32, 1, 2, 1, 64),
        seq_len=32,
        batch=16,
        steps=120,
        lr=3e-3,
    )
    train_pair(recipe, CORPUS).save(root / "target", root / "draft")
    other = replace(recipe, vocab_size=280, steps=1)
    other_pair = train_pair(other, CORPUS[:4])
    other_pair.save(root / "other", root / "other-target")
    return TinyPair(root / "target", root / "draft", root / "other")
