"""Threads are set explicitly, never left to torch's default, and named in the hardware key."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
import torch

from adaptivespec import settings
from adaptivespec.engine.hardware import usable_cpus
from adaptivespec.engine.loader import load_runner
from adaptivespec.errors import ConfigError

from ..conftest import TinyPair, engine_config


@pytest.fixture
def torch_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_default_to_the_usable_cpus_and_can_be_set(
    tiny_pair: TinyPair, torch_threads: None, capsys: pytest.CaptureFixture[str]
) -> None:
    config = engine_config(tiny_pair, proposer="ngram")
    torch.set_num_threads(7)  # whatever ran before must not leak into the engine
    loaded = load_runner(config, progress=False)
    assert torch.get_num_threads() == usable_cpus()
    assert loaded.runner.hardware_key.endswith(f":{usable_cpus()}")
    loaded = load_runner(replace(config, threads=1), progress=True)
    assert torch.get_num_threads() == 1 and loaded.runner.hardware_key.endswith(":1")
    assert f"torch threads: 1 of {usable_cpus()} usable CPUs" in capsys.readouterr().err  # said at start


def test_threads_come_from_flags_and_environment() -> None:
    assert settings.load(None, {"ADAPTIVESPEC_THREADS": "3"}, {}).engine.threads == 3
    assert settings.load(None, {}, {"threads": 2}).engine.threads == 2
    with pytest.raises(ConfigError, match="threads"):
        settings.load(None, {}, {"threads": -1})
