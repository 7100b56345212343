"""The KV cache is sized from a memory budget, and says what it took."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adaptivespec.config import EngineConfig, parse_size
from adaptivespec.engine.loader import load_runner
from adaptivespec.errors import ConfigError

from ..conftest import TinyPair, engine_config


def test_sizes_parse_with_units_and_refuse_nonsense() -> None:
    assert parse_size("auto") == 0
    assert parse_size("4GiB") == 4 * 2**30 and parse_size("512 MiB") == 512 * 2**20
    assert parse_size("1.5GB") == 1_500_000_000 and parse_size("2000") == 2000
    for bad in ("", "-1GiB", "4 parsecs", "0", "GiB"):
        with pytest.raises(ConfigError, match="kv_cache_memory"):
            parse_size(bad)
    with pytest.raises(ConfigError, match="kv_cache_memory"):
        EngineConfig(kv_cache_memory="lots")


def test_a_budget_lowers_max_batch_and_is_printed(
    tiny_pair: TinyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    config = engine_config(tiny_pair)  # 16 rows of a target and a draft
    whole = load_runner(config, progress=True)
    assert whole.runner.max_batch == 16
    assert "KV cache: 16 rows" in capsys.readouterr().err
    per_row = whole.runner.kv_bytes // 16
    small = load_runner(replace(config, kv_cache_memory=str(per_row * 5 + 1)), progress=True)
    assert small.runner.max_batch == 5 and small.runner.kv_bytes <= per_row * 5 + 1
    err = capsys.readouterr().err
    assert "KV cache: 5 rows" in err and "max_batch lowered from 16 to 5" in err
    with pytest.raises(ConfigError, match="raise --kv-cache-memory or lower --max-context"):
        load_runner(replace(config, kv_cache_memory=str(per_row - 1)), progress=False)
