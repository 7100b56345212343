"""What the engine refuses at load, and how it reads layer kinds from nested configs."""

from __future__ import annotations

import pytest
from transformers import (
    DeepseekV3Config,
    Gemma3Config,
    LlamaConfig,
    MambaConfig,
    Phi3Config,
    Qwen2Config,
)

from adaptivespec.engine.attention import FULL, SLIDING, AttentionSpec, check_supported
from adaptivespec.engine.kvcache import CacheShape
from adaptivespec.errors import ModelLoadError


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (DeepseekV3Config(num_hidden_layers=2), "multi-head latent attention"),
        (MambaConfig(num_hidden_layers=2), "state-space"),
        (LlamaConfig(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "'dynamic' RoPE"),
        (Phi3Config(rope_scaling={"type": "longrope", "short_factor": [1.0] * 48,
                                  "long_factor": [1.0] * 48}, original_max_position_embeddings=4096),
         "'longrope' RoPE"),
        (LlamaConfig(max_position_embeddings=512), "max_position_embeddings = 512"),
    ],
)  # fmt: skip
def test_models_that_cannot_run_exactly_are_refused_with_a_reason(config: object, named: str) -> None:
    with pytest.raises(ModelLoadError, match=named):
        check_supported(config, positions=1024 + 8)  # type: ignore[arg-type]


def test_quantized_checkpoints_are_refused() -> None:
    config = LlamaConfig()
    config.quantization_config = {"quant_method": "awq"}
    with pytest.raises(ModelLoadError, match="quantized"):
        check_supported(config, 64)


def test_supported_models_pass() -> None:
    check_supported(LlamaConfig(), 2048)
    check_supported(Qwen2Config(use_sliding_window=True), 2048)


def test_qwen2_window_applies_only_where_its_layer_types_say() -> None:
    assert AttentionSpec.from_config(Qwen2Config(num_hidden_layers=3)).window is None
    spec = AttentionSpec.from_config(
        Qwen2Config(num_hidden_layers=3, use_sliding_window=True, sliding_window=16, max_window_layers=1)
    )
    assert spec.layer_kinds == (FULL, SLIDING, SLIDING) and spec.window == 16 and spec.mixed


def test_multimodal_gemma3_is_read_through_its_text_config() -> None:
    config = Gemma3Config()
    text = config.get_text_config()
    spec = AttentionSpec.from_config(config)
    assert spec.layer_kinds == tuple(text.layer_types) and spec.window == text.sliding_window
    shape = CacheShape.from_config(config, max_batch=2, max_len=64)
    assert (shape.num_layers, shape.kv_heads, shape.head_dim) == (
        text.num_hidden_layers, text.num_key_value_heads, text.head_dim,
    )  # fmt: skip
