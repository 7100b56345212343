"""`bench drafters`: each drafter against plain decoding at batch 1, on either runtime."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from adaptivespec.cli import main
from adaptivespec.engine.openvino_export import openvino_available

from ..conftest import TinyPair


@pytest.mark.parametrize("runtime", ["torch", "openvino"])
def test_the_head_and_prompt_lookup_keep_plain_decodings_tokens(
    tiny_pair: TinyPair, tiny_head: Path, tmp_path: Path, runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if runtime == "openvino" and not openvino_available():
        if os.environ.get("ADAPTIVESPEC_REQUIRE_OPENVINO"):
            raise RuntimeError("openvino is not installed: pip install -e '.[openvino]'")
        pytest.skip("openvino is not installed (pip install -e '.[openvino]')")
    monkeypatch.setenv("ADAPTIVESPEC_CACHE_DIR", str(tmp_path / "cache"))  # the converted model's home
    out = tmp_path / "drafters.json"
    argv = ["bench", "drafters", "--target", str(tiny_pair.target), "--traffic", "code-edit"]
    argv += ["--drafters", "ngram,eagle3,off+eagle3", "--head", str(tiny_head), "--k", "3"]
    argv += ["--rounds", "1", "--requests", "2", "--max-tokens", "24", "--threads", "1"]
    assert main([*argv, "--runtime", runtime, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["scenario"]["runtime"] == runtime
    contenders = {c["name"]: c for c in result["contenders"]}
    assert set(contenders) == {"off", "ngram", "eagle3", "off+eagle3"}
    assert all(c["identical_to_off"] for c in contenders.values())
    assert contenders["eagle3"]["tokens_per_step"] > 1.0  # the head's drafts were kept, on its states
    assert contenders["off+eagle3"]["tokens_per_step"] == 1.0
