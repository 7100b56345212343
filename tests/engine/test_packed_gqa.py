"""Packed GQA attention is the same attention as transformers' SDPA, in another order of work."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from adaptivespec.bench.step_variants import attention_variants, compare
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.packed_gqa import NAME, packed_gqa_attention

from ..conftest import TinyPair, engine_config


def _inputs(batch: int, tokens: int, seed: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, 6, tokens, 8, generator=generator)  # 6 query heads over 2 KV heads
    key = torch.randn(batch, 2, 13, 8, generator=generator)
    value = torch.randn(batch, 2, 13, 8, generator=generator)
    # Ragged rows: row r sees columns up to 5 + r + t (a verify pass at a different length per row).
    columns = torch.arange(13).view(1, 1, 1, 13)
    limit = (5 + torch.arange(batch).view(-1, 1, 1, 1)) + torch.arange(tokens).view(1, 1, -1, 1)
    return query, key, value, columns <= limit


@pytest.mark.parametrize("tokens", [2, 5, 9])
def test_packed_attention_equals_sdpa(tokens: int) -> None:
    query, key, value, mask = _inputs(batch=3, tokens=tokens, seed=tokens)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True)
    packed, _ = packed_gqa_attention(module, query, key, value, mask, scaling=0.3)  # type: ignore[arg-type]
    reference, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)  # type: ignore[arg-type]
    assert packed.shape == reference.shape == (3, tokens, 6, 8)
    torch.testing.assert_close(packed, reference, rtol=1e-5, atol=1e-6)


def test_the_loaded_models_use_it_and_greedy_tokens_do_not_change(tiny_pair: TinyPair) -> None:
    loaded = load_runner(engine_config(tiny_pair, "draft", max_batch=4), progress=False)
    runner = loaded.runner
    assert isinstance(runner, HFRunner)
    assert all(model.config._attn_implementation == NAME for model in runner.models)
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19], [20, 21, 22, 23]]
    case = compare(runner, prompts, 3, steps=6, variants=attention_variants(), repeats=1)
    assert case.mismatched_rows == {"sdpa": 0, "packed-gqa": 0}
    assert set(case.median_ms) == {"sdpa", "packed-gqa"}
