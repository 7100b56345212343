"""The named traffic mixes: built from the standard library, seeded, shaped as their names say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptivespec.bench.traffic import TrafficShape, requests
from adaptivespec.bench.traffic_mixes import _AGENT_SYSTEM, MIXES, functions, prompts
from adaptivespec.cli import main
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.loader import load_tokenizer
from adaptivespec.engine.suffix_proposer import suffix_available
from adaptivespec.engine.tokenizer import Tokenizer

from ..conftest import TinyPair


@pytest.fixture(scope="module")
def tokenizer(tiny_pair: TinyPair) -> Tokenizer:
    return load_tokenizer(str(tiny_pair.target))


def _text(tokenizer: Tokenizer, ids: list[int]) -> str:
    return str(tokenizer.decode(ids))


@pytest.mark.parametrize("mix", MIXES)
def test_every_mix_gives_the_count_asked_seeded(tokenizer: Tokenizer, mix: str) -> None:
    first = prompts(mix, tokenizer, 6, seed=0)
    assert len(first) == 6 and all(len(p) > 8 for p in first)
    assert prompts(mix, tokenizer, 6, seed=0) == first
    assert prompts(mix, tokenizer, 6, seed=1) != first  # another seed: other prompts


def test_code_edit_prompts_hold_a_whole_function_and_an_instruction(tokenizer: Tokenizer) -> None:
    pool = {f.source for f in functions(held_out_documents())}
    for ids in prompts("code-edit", tokenizer, 5, seed=0):
        text = _text(tokenizer, ids)
        assert "Reply with the whole function." in text
        body = text.split("```python\n", 1)[1].split("\n```", 1)[0]
        assert body in pool


def test_agent_turns_hold_the_earlier_turns_and_repeat_the_tool_json(tokenizer: Tokenizer) -> None:
    """Sessions go turn by turn: 3 sessions of 3 turns are prompts [s0t0, s1t0, s2t0, s0t1, ...]."""
    turns = [_text(tokenizer, ids) for ids in prompts("agent", tokenizer, 9, seed=0)]
    for session in range(3):
        first, second, third = turns[session], turns[session + 3], turns[session + 6]
        assert second.startswith(first.rsplit("assistant", 1)[0]) or first[:200] in second
        assert '{"tool": "search", "arguments": {"query": "def ' in second
        assert '{"tool": "read_file"' in third and '{"tool": "read_file"' not in second
    assert all(_AGENT_SYSTEM.splitlines()[0] in t for t in turns)


def test_mixed_interleaves_the_three(tokenizer: Tokenizer) -> None:
    mixed = prompts("mixed", tokenizer, 6, seed=0)
    assert mixed[0] == prompts("chat", tokenizer, 2, seed=0)[0]
    assert mixed[1] == prompts("code-edit", tokenizer, 2, seed=0)[0]
    assert mixed[2] == prompts("agent", tokenizer, 2, seed=0)[0]


def test_an_unknown_mix_is_refused(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="traffic mix must be one of"):
        prompts("poetry", tokenizer, 2)


def test_workload_requests_take_a_mix_in_turn(tokenizer: Tokenizer) -> None:
    mix = prompts("code-edit", tokenizer, 3, seed=0)
    corpus = list(range(5000))
    served = requests(TrafficShape(), 1.0, 5, corpus, seed=0, prompts=mix)
    assert [r.prompt for r in served] == [mix[0], mix[1], mix[2], mix[0], mix[1]]


@pytest.mark.skipif(
    not suffix_available(), reason="arctic-inference is not installed (ops/install-suffix.sh)"
)
def test_bench_drafters_reports_each_drafter_against_off(
    tiny_pair: TinyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shape and exactness only: a tiny model says nothing about which drafter pays."""
    out = tmp_path / "drafters.json"
    args = ["bench", "drafters", "--target", str(tiny_pair.target), "--traffic", "code-edit"]
    args += ["--drafters", "ngram,suffix,suffix-local", "--requests", "2", "--max-tokens", "24"]
    assert main([*args, "--rounds", "2", "--k", "4", "--threads", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["scenario"]["traffic"] == "code-edit" and report["scenario"]["batch"] == 1
    assert report["machine"]["threads"] == 1 and "cpu_capability" in report["machine"]
    contenders = {c["name"]: c for c in report["contenders"]}
    assert list(contenders) == ["off", "ngram", "suffix", "suffix-local"]
    assert contenders["off"]["tokens_per_step"] == 1.0
    for c in contenders.values():
        assert c["identical_to_off"] and c["tokens_per_step"] >= 1.0 and len(c["steps"]) == 2
    assert "tokens/step" in capsys.readouterr().out
