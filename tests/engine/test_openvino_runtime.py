"""The `openvino` runtime: the target's forwards on OpenVINO's paged attention, outputs exact.

Greedy tokens must equal transformers' `generate()` on the same weights in f32, with
speculation (n-gram and draft model, K up to 8), staggered arrivals, prompts fed in chunks
and into plain steps, and rows moved as requests finish.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.openvino_export import openvino_available
from adaptivespec.engine.openvino_target import BlockTable
from adaptivespec.engine.records import Completion
from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.static_policy import FixedK, StaticTable
from adaptivespec.errors import ConfigError

from ..conftest import TinyPair, engine_config
from .drafting import REPEATING_PROMPTS, serve_staggered, top_p
from .test_architectures import _config as _arch_config
from .test_architectures import _configs, _reference
from .test_architectures import _serve as _arch_serve
from .test_eagle3 import POLICIES, POLICY_IDS, check_greedy_drafting, check_sampled_drafting, config_with_head
from .test_exactness import GREEDY, PROMPTS, _serve

if not openvino_available():
    if os.environ.get("ADAPTIVESPEC_REQUIRE_OPENVINO"):
        raise RuntimeError("openvino is not installed: pip install -e '.[openvino]'")
    pytest.skip("openvino is not installed (pip install -e '.[openvino]')", allow_module_level=True)


def _config(pair: TinyPair, proposer: str, **limits: int) -> EngineConfig:
    config = engine_config(pair, proposer, **limits)
    return replace(config, models=replace(config.models, runtime="openvino"))


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("openvino-cache")


@pytest.fixture(autouse=True)
def _own_cache(cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTIVESPEC_CACHE_DIR", str(cache_root))


def _load(config: EngineConfig) -> LoadedModels:
    return load_runner(config, progress=False)


@pytest.fixture(scope="module")
def generated(tiny_pair: TinyPair) -> list[list[int]]:
    """What transformers' own `generate()` gives for each prompt, greedy, in f32."""
    loaded = load_runner(engine_config(tiny_pair, "ngram"), progress=False)
    model = loaded.runner.target.model
    out = []
    for text in PROMPTS:
        prompt = torch.tensor([loaded.tokenizer.encode(text)])
        with torch.inference_mode():
            reference = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=GREEDY.max_tokens,
                do_sample=False,
            )
        out.append(reference[0, prompt.shape[1] :].tolist())
    return out


def _assert_matches(outputs: list[Completion], generated: list[list[int]]) -> None:
    checked = 0
    for completion, expected in zip(outputs, generated, strict=True):
        # generate() stops at EOS; the requests ignore it, so compare up to where it stopped.
        assert completion.token_ids[: len(expected)] == expected
        checked += len(expected)
    assert checked >= 50


def test_plain_steps_equal_transformers_generate(tiny_pair: TinyPair, generated: list[list[int]]) -> None:
    config = _config(tiny_pair, "ngram")
    loaded = _load(config)
    assert loaded.runner.hardware_key.endswith("+openvino")
    assert loaded.runner.cached is None
    _assert_matches(asyncio.run(_serve(loaded, config, FixedK(0))), generated)


@pytest.mark.parametrize(
    ("proposer", "k"), [("ngram", 1), ("ngram", 4), ("draft", 1), ("draft", 4), ("draft", 8)]
)
def test_speculative_steps_equal_transformers_generate(
    tiny_pair: TinyPair, generated: list[list[int]], proposer: str, k: int
) -> None:
    config = _config(tiny_pair, proposer)
    outputs = asyncio.run(_serve(_load(config), config, FixedK(k)))
    _assert_matches(outputs, generated)
    drafted = sum(o.stats.drafted for o in outputs)
    accepted = sum(o.stats.accepted for o in outputs)
    assert drafted > 0, "the proposer never drafted, so nothing was verified"
    if proposer == "draft":
        assert 0 < accepted < drafted  # both kept and rejected drafts: the rollback ran


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "top-p"])
def test_rows_verify_their_own_drafts_and_stay_exact(tiny_pair: TinyPair, sampled: bool) -> None:
    """Prompt lookup at K = 6 over prompts some of which repeat themselves: rows find drafts of
    different lengths, and each verifies its own only (a mean width below the step's). The
    tokens are plain decoding's, greedy and sampled (the padded positions are never chosen)."""
    config = _config(tiny_pair, "ngram")
    assert _load(config).runner.target.skips_pads

    def settings(i: int) -> SamplingParams:
        return top_p(i, 11) if sampled else replace(top_p(i, 11), temperature=0.0)

    plain, _ = asyncio.run(serve_staggered(config, REPEATING_PROMPTS, settings, FixedK(0), 1))
    spec, records = asyncio.run(serve_staggered(config, REPEATING_PROMPTS, settings, FixedK(6), 1))
    assert [c.token_ids for c in spec] == [c.token_ids for c in plain]
    ragged = [r for r in records if r.verified_width is not None and r.verified_width < r.width]
    assert ragged, "no step had rows with drafts of different lengths"
    assert sum(r.accepted for r in ragged) > 0


def test_prompts_in_chunks_and_inside_plain_steps_stay_exact(
    tiny_pair: TinyPair, generated: list[list[int]]
) -> None:
    """Prompts go in 5 tokens at a time, some as forwards of their own and some inside a plain
    step's forward (at K = 0), while speculation switches on and off."""
    config = _config(tiny_pair, "draft", prefill_chunk_tokens=5)
    loaded = _load(config)
    assert loaded.runner.fuses_prompts
    flapping = StaticTable.parse([(1, 3, 0), (4, 6, 2), (7, 9, 0)], default_k=0)
    _assert_matches(asyncio.run(_serve(loaded, config, flapping)), generated)


def test_rows_moved_while_a_prompt_goes_in_keep_their_caches(tiny_pair: TinyPair) -> None:
    """Compaction as the scheduler does it: row 1 finished, row 4 moves into it, and the prompt
    half-fed into row 5 follows into row 4 (a row both moved into and moved out of). Each row's
    next logits must then be transformers' own for that row's text."""
    loaded = _load(_config(tiny_pair, "ngram"))
    target, model = loaded.runner.target, loaded.runner.target.model
    prompts = [loaded.tokenizer.encode(text) for text in PROMPTS[:6]]
    with torch.inference_mode():
        target.prefill(0, prompts[:5], [0] * 5)
        target.prefill(5, [prompts[5][:3]], [0])
        target.cache.move_rows(torch.tensor([4, 5]), torch.tensor([1, 4]), 0)
        ours = target.prefill(4, [prompts[5][3:]], [3])[0]
        theirs = model(torch.tensor([prompts[5]])).logits[0, -1]
        assert torch.allclose(ours, theirs, atol=1e-3)
        for row, prompt in enumerate([prompts[0], prompts[4], prompts[2], prompts[3]]):
            ours = target.prefill(row, [[7]], [len(prompt)])[0]  # one more token on each row
            theirs = model(torch.tensor([[*prompt, 7]])).logits[0, -1]
            assert torch.allclose(ours, theirs, atol=1e-3), f"row {row}"


def test_passes_longer_and_shorter_than_the_last_read_their_own_inputs(tiny_pair: TinyPair) -> None:
    """The request reads its inputs from buffers that grow with the longest pass so far: each
    pass, longer or shorter than the one before, gives the logits transformers gives."""
    loaded = _load(_config(tiny_pair, "ngram"))
    target, model = loaded.runner.target, loaded.runner.target.model
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    for row, length in enumerate((40, 150, 7, 200)):  # past the first buffers, then back
        ids = rng.integers(0, vocab, size=length).tolist()
        logits = target.prefill(row, [ids], [0])  # [1, V]: the last token's
        with torch.inference_mode():
            expected = model(torch.tensor([ids])).logits[0, -1]
        torch.testing.assert_close(logits[0], expected, rtol=1e-4, atol=1e-4)


def test_the_conversion_is_cached(tiny_pair: TinyPair, cache_root: Path) -> None:
    _load(_config(tiny_pair, "ngram"))
    converted = [p for p in (cache_root / "openvino-runtime").iterdir() if p.is_dir()]
    _load(_config(tiny_pair, "ngram"))
    assert [p for p in (cache_root / "openvino-runtime").iterdir() if p.is_dir()] == converted
    assert len(converted) == 1 and (converted[0] / "model.xml").exists()


def test_a_first_conversion_warns_of_nothing_the_served_graph_does(
    tiny_pair: TinyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trace's notes on shape checks it fixed concern branches the paged pass replaces:
    a first start shows none of them (the exactness tests cover every shape served)."""
    monkeypatch.setenv("ADAPTIVESPEC_CACHE_DIR", str(tmp_path))  # nothing converted yet
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _load(_config(tiny_pair, "ngram"))
    assert (tmp_path / "openvino-runtime").is_dir()
    assert not [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]


def test_moving_rows_hands_blocks_over_and_keeps_every_block_owned() -> None:
    table = BlockTable(rows=4, cache_len=70)  # 3 blocks of 32 per row
    before = table.table.copy()
    table.move([3, 2], [0, 1])
    assert (table.table[0] == before[3]).all() and (table.table[1] == before[2]).all()
    assert sorted(table.table.ravel().tolist()) == list(range(12))
    # Compaction: row 4 fills the hole at 1, and the prompt being fed at 5 follows into 4.
    table = BlockTable(rows=6, cache_len=64)
    before = table.table.copy()
    table.move([4, 5], [1, 4])
    assert (table.table[1] == before[4]).all() and (table.table[4] == before[5]).all()
    assert sorted(table.table.ravel().tolist()) == list(range(12))
    table = BlockTable(rows=4, cache_len=70)
    before = table.table.copy()
    table.move([3, 2], [0, 1])
    blocks, begins = table.of(np.array([0, 2]), np.array([33, 5]))
    assert blocks.tolist() == [*before[3][:2].tolist(), before[1][0]] and begins.tolist() == [0, 2, 3]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"compile": "on"}, "compiles its own graph"),
        ({"device": "cuda"}, "runs on the CPU"),
        ({"dtype": "bfloat16"}, "float32"),
    ],
)
def test_settings_it_cannot_run_are_refused_with_what_to_do(change: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelConfig(runtime="openvino", **change)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", POLICIES, ids=POLICY_IDS)
def test_an_eagle3_head_drafts_exactly_on_the_states_openvino_returns(
    tiny_pair: TinyPair, tiny_head: Path, policy: SpecPolicy
) -> None:
    """The same checks as on torch (test_eagle3.py), the states now from OpenVINO's passes,
    prompts going in inside plain steps' forwards as this runtime feeds them; at K = 4, 5
    tokens at a time."""
    config = config_with_head(tiny_pair, tiny_head, runtime="openvino")
    if policy is POLICIES[1]:
        config = replace(config, prefill_chunk_tokens=5)
    check_greedy_drafting(config, policy)


def test_sampled_drafting_with_an_eagle3_head_keeps_plain_decodings_tokens(
    tiny_pair: TinyPair, tiny_head: Path
) -> None:
    check_sampled_drafting(config_with_head(tiny_pair, tiny_head, runtime="openvino"))


def test_the_head_reads_the_states_the_torch_runtime_keeps(tiny_pair: TinyPair, tiny_head: Path) -> None:
    """Prompts, then steps at K changing (0 among them): every state the head may read (each
    row's columns up to its last token) equals the torch runtime's, which its hooks keep."""
    greedy = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    prompts = [[5, 9, 12, 40, 41, 7], [3, 3, 8], [17]]
    kept = {}
    for runtime in ("torch", "openvino"):
        runner = _load(config_with_head(tiny_pair, tiny_head, runtime=runtime)).runner
        assert runner.runtime == runtime
        runner.prefill(0, [PrefillItem(p, greedy, seed=0) for p in prompts])
        for k in (1, 3, 0, 0, 2, 4, 0, 1, 3):
            runner.decode(3, k)
        lens = runner.rows.host_lens[:3].copy()
        tokens = [runner.rows.host_tokens[r, : lens[r]].tolist() for r in range(3)]
        states = runner.proposers["eagle3"].tap.states  # type: ignore[attr-defined]
        kept[runtime] = tokens, [states[r, : lens[r] - 1].clone() for r in range(3)]
    (tokens, torch_states), (ov_tokens, ov_states) = kept["torch"], kept["openvino"]
    assert ov_tokens == tokens
    for ours, theirs in zip(ov_states, torch_states, strict=True):
        assert theirs.abs().amax() > 0  # written, not a zeroed buffer on both sides
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_the_default_runtime_is_openvino_on_a_cpu_and_torch_where_it_cannot_run(
    tiny_pair: TinyPair, tiny_head: Path
) -> None:
    auto = engine_config(tiny_pair, "ngram")
    auto = replace(auto, models=replace(auto.models, runtime="auto"))
    assert _load(auto).runner.runtime == "openvino"
    assert _load(config_with_head(tiny_pair, tiny_head, "auto", runtime="auto")).runner.runtime == "openvino"
    bf16 = replace(auto, models=replace(auto.models, dtype="bfloat16"))
    assert _load(bf16).runner.runtime == "torch"


def test_a_window_wider_than_any_row_runs_on_openvino_and_stays_exact(
    tiny_pair: TinyPair, tmp_path: Path
) -> None:
    # The windowed families of test_architectures.py stay on torch; a window no row outgrows
    # changes nothing, so OpenVINO still serves the model.
    config = replace(_arch_config(tmp_path, "ngram"), max_context=64)
    tokenizer = AutoTokenizer.from_pretrained(tiny_pair.target)
    model_config = _configs(len(tokenizer))["mistral-window"]
    model_config.sliding_window = config.max_context + config.max_spec_tokens + 1
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(model_config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    config = replace(config, models=replace(config.models, runtime="openvino"))
    loaded = _load(config)
    assert loaded.runner.runtime == "openvino"
    assert asyncio.run(_arch_serve(loaded, config, 0)) == _reference(loaded)
