from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptivespec.errors import ConfigError
from adaptivespec.sim import specs


def _write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_custom_hardware_and_model_files_load(tmp_path: Path) -> None:
    hw = _write(
        tmp_path,
        "hw.json",
        {"name": "mi300x", "mem_bandwidth_gbps": 5300, "peak_tflops": 1307, "num_gpus": 2},
    )
    model = _write(
        tmp_path,
        "m.json",
        {
            "name": "tiny",
            "params": 1e8,
            "layers": 4,
            "hidden_size": 512,
            "num_heads": 8,
            "num_kv_heads": 2,
            "head_dim": 64,
        },
    )
    loaded = specs.hardware(spec_file=hw)
    assert loaded.name == "mi300x" and loaded.num_gpus == 2 and loaded.step_overhead_us == 6100.0
    assert specs.model(spec_file=model).kv_bytes_per_token == 2 * 4 * 2 * 64 * 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"name": "x", "mem_bandwidth_gbps": 1},
            r"missing keys \['peak_tflops'\]; required keys: name, mem_bandwidth_gbps",
        ),
        (
            {"name": "x", "mem_bandwidth_gbps": 1, "peak_tflops": 1, "bandwith": 2},
            r"unknown keys \['bandwith'\]",
        ),
        (
            {"name": "x", "mem_bandwidth_gbps": -1, "peak_tflops": 1},
            "mem_bandwidth_gbps must be a number > 0",
        ),
        (
            {"name": "x", "mem_bandwidth_gbps": 1, "peak_tflops": 1, "efficiency": 1.5},
            r"efficiency must be in \(0, 1\]",
        ),
        ("{not json", "is not valid JSON"),
        ([1, 2], "must hold a JSON object"),
    ],
)
def test_bad_hardware_files_name_the_problem(tmp_path: Path, content: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        specs.hardware(spec_file=_write(tmp_path, "hw.json", content))


def test_unknown_presets_list_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="h100-sxm, h200, a100-80gb, l4"):
        specs.hardware("h1000")
    with pytest.raises(ConfigError, match="llama-3.1-8b, llama-3.1-70b"):
        specs.model("gpt-5")


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        specs.model(spec_file=tmp_path / "absent.json")
