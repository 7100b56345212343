"""One tiny random-weight model per architecture family, served exactly as transformers' generate().

Windows are 8 tokens and contexts run past 30, so sliding-window layers really drop keys:
a full-attention mask used by mistake changes the output (see the last test).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    PretrainedConfig,
    Qwen2Config,
    Qwen3Config,
)

from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.attention import FULL, AttentionSpec
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.runner import DecodeOutput, PrefillItem, PrefillOutput
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.errors import ConfigError

from ..conftest import TEST_DEVICE, TinyPair

WINDOW = 8
PROMPTS = ["def add(a, b):\n    return", "for i in range(10):\n", "import os\nimport sys\nprint(", "x"]
GREEDY = SamplingParams(max_tokens=28, temperature=0.0, ignore_eos=True)
_COMMON: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4}
_GQA: dict[str, Any] = _COMMON | {"num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512}


def _configs(vocab: int) -> dict[str, PretrainedConfig]:
    ids = {"vocab_size": vocab, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
    return {
        "llama": LlamaConfig(**_GQA, **ids, num_hidden_layers=2),
        "qwen2-sliding": Qwen2Config(
            **_GQA, **ids, num_hidden_layers=3, use_sliding_window=True, sliding_window=WINDOW,
            max_window_layers=1,
        ),
        "qwen3": Qwen3Config(**_GQA, **ids, num_hidden_layers=2),
        "mistral-window": MistralConfig(**_GQA, **ids, num_hidden_layers=2, sliding_window=WINDOW),
        "gemma2-softcap": Gemma2Config(
            **_GQA, **ids, num_hidden_layers=2, sliding_window=WINDOW, query_pre_attn_scalar=16,
            attn_logit_softcapping=20.0, final_logit_softcapping=15.0,
        ),
        "gemma3-local-global": Gemma3TextConfig(
            **_GQA, **ids, num_hidden_layers=4, sliding_window=WINDOW, query_pre_attn_scalar=16,
            layer_types=["sliding_attention", "full_attention"] * 2,
        ),
        "phi3-window": Phi3Config(**_COMMON, **ids, num_hidden_layers=2, num_key_value_heads=2,
                                  sliding_window=WINDOW, max_position_embeddings=512),
        "gpt2": GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=512, **ids),
    }  # fmt: skip


@pytest.fixture(scope="module")
def families(tiny_pair: TinyPair, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family saved to disk with the tiny pair's tokenizer, like any HF model directory."""
    root = tmp_path_factory.mktemp("families")
    tokenizer = AutoTokenizer.from_pretrained(tiny_pair.target)
    saved = {}
    for index, (name, config) in enumerate(_configs(len(tokenizer)).items()):
        torch.manual_seed(index)
        model = AutoModelForCausalLM.from_config(config)
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        saved[name] = root / name
    return saved


def _config(path: Path, proposer: str) -> EngineConfig:
    draft = str(path) if proposer == "draft" else None  # the target drafts for itself: full acceptance
    models = ModelConfig(
        target=str(path), draft=draft, proposer=proposer, device=TEST_DEVICE, dtype="float32", runtime="torch"
    )  # type: ignore[arg-type]
    return EngineConfig(models=models, max_batch=4, max_context=128, max_queued=16)


async def _serve(loaded: LoadedModels, config: EngineConfig, k: int) -> list[list[int]]:
    """The prompts as one continuous batch: later ones join while earlier ones decode."""
    engine = Engine(loaded.runner, loaded.tokenizer, FixedK(k), config)
    await engine.start()
    try:
        tasks = []
        for prompt in PROMPTS:
            tasks.append(asyncio.create_task(engine.generate(prompt, GREEDY)))
            target = engine.steps + 3
            while engine.steps < target and not all(t.done() for t in tasks):
                await asyncio.sleep(0.001)
        return [c.token_ids for c in await asyncio.gather(*tasks)]
    finally:
        await engine.stop()


def _reference(loaded: LoadedModels) -> list[list[int]]:
    model = loaded.runner.target.model
    outputs = []
    for prompt in PROMPTS:
        ids = torch.tensor([loaded.tokenizer.encode(prompt)])
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=GREEDY.max_tokens, do_sample=False,
            min_new_tokens=GREEDY.max_tokens,
        )  # fmt: skip
        outputs.append(out[0, ids.shape[1] :].tolist())
    return outputs


# Families whose prompts go into K = 0 decode steps' forwards (segments.py): full attention
# through our attention function. The others prefill apart (sliding windows, eager soft-capping).
FUSES_PROMPTS = {"llama", "qwen3", "gpt2"}


@pytest.mark.parametrize("family", list(_configs(1)))
def test_greedy_output_equals_generate_at_every_k(families: dict[str, Path], family: str) -> None:
    reference: list[list[int]] | None = None
    for proposer in ("ngram", "draft"):
        config = _config(families[family], proposer)
        loaded = load_runner(config, progress=False)
        assert loaded.runner.fuses_prompts == (family in FUSES_PROMPTS)
        fused = _count_fused_steps(loaded)
        reference = reference or _reference(loaded)
        for k in (0, 1, 4, 8) if proposer == "ngram" else (1, 4, 8):
            outputs = asyncio.run(_serve(loaded, config, k))
            assert outputs == reference, f"{family}, {proposer}, K={k}"
            if k == 0 and family in FUSES_PROMPTS:
                assert fused, "no prompt went into a decode step"


def _count_fused_steps(loaded: LoadedModels) -> list[int]:
    """Records the prompt chunks of every decode step that carried some."""
    fused: list[int] = []
    together = loaded.runner.decode_with_prompts

    def recording(batch: int, items: list[PrefillItem]) -> tuple[DecodeOutput, PrefillOutput]:
        fused.append(len(items))
        return together(batch, items)

    loaded.runner.decode_with_prompts = recording  # type: ignore[method-assign]
    return fused


@pytest.mark.parametrize("family", ["mistral-window", "gemma3-local-global", "qwen2-sliding"])
def test_a_full_attention_mask_by_mistake_changes_the_output(families: dict[str, Path], family: str) -> None:
    config = _config(families[family], "ngram")
    loaded = load_runner(config, progress=False)
    reference = _reference(loaded)
    cached = loaded.runner.target
    assert asyncio.run(_serve(loaded, config, 0)) == reference
    cached.attention = replace(cached.attention, layer_kinds=(FULL,) * len(cached.attention.layer_kinds))
    assert asyncio.run(_serve(loaded, config, 0)) != reference


def test_eager_soft_capped_models_get_an_additive_mask(families: dict[str, Path]) -> None:
    loaded = load_runner(_config(families["gemma2-softcap"], "ngram"), progress=False)
    assert loaded.runner.target.model.config._attn_implementation == "eager"
    assert loaded.runner.target.attention == AttentionSpec(
        ("sliding_attention", "full_attention"), WINDOW, True
    )


# Families with a window that rows outgrow: OpenVINO's paged attention would drop it.
WINDOWED = [name for name, config in _configs(1).items() if AttentionSpec.from_config(config).window]


@pytest.mark.parametrize("family", WINDOWED)
def test_the_default_runtime_serves_windowed_families_exactly_and_openvino_refuses_them(
    families: dict[str, Path], family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("openvino")
    monkeypatch.setenv("ADAPTIVESPEC_CACHE_DIR", str(tmp_path))
    config = _config(families[family], "ngram")
    on = {
        runtime: replace(config, models=replace(config.models, runtime=runtime))
        for runtime in ("auto", "openvino")
    }
    with pytest.raises(ConfigError, match=f"sliding window of {WINDOW} tokens.*use --runtime torch"):
        load_runner(on["openvino"], progress=False)
    loaded = load_runner(on["auto"], progress=False)
    assert loaded.runner.runtime == "torch"
    assert asyncio.run(_serve(loaded, on["auto"], 0)) == _reference(loaded)
