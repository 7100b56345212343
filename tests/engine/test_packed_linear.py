"""oneDNN-packed linear layers compute what torch's linear computes, up to float rounding."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from adaptivespec.bench.step_variants import compare, linear_variants
from adaptivespec.config import ModelConfig
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.packed_linear import (
    PackedLinear,
    can_pack,
    pack_linears,
    packed_layers,
    torch_linears,
)
from adaptivespec.errors import ConfigError

from ..conftest import TEST_DEVICE, TinyPair, engine_config

needs_onednn = pytest.mark.skipif(
    not can_pack(torch.device("cpu"), torch.float32), reason="this torch build has no oneDNN packing"
)


class _Adapter(torch.nn.Linear):
    """A Linear subclass computes something of its own, so packing must leave it alone."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 48), (8, 48), (3, 5, 48)])
def test_a_packed_linear_equals_torchs(bias: bool, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 80, bias=bias)
    x = torch.randn(*shape)
    strided = torch.randn(*shape[:-1], 2 * 48)[..., ::2]  # a view, as a sliced hidden state is
    with torch.inference_mode():
        packed = PackedLinear(linear)
        for inputs in (x, strided):
            expected = linear(inputs)
            got = packed(inputs)
            assert got.shape == expected.shape
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_packing_a_model_keeps_its_logits_its_tied_weights_and_its_own_layers() -> None:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=200, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    model.model.layers[0].mlp.down_proj = _Adapter(96, 64, bias=False)
    ids = torch.randint(0, 200, (2, 9))
    with torch.inference_mode():
        before = model(ids).logits
        packed = pack_linears(model)
        after = model(ids).logits
    # q, k, v, o, gate, up, down in each layer, and the output head, less the adapter.
    assert packed == packed_layers([model]) == 7 * 2 + 1 - 1
    assert isinstance(model.model.layers[0].mlp.down_proj, _Adapter)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_a_baseline_runs_torchs_linears_and_the_packing_comes_back_even_after_an_error() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    pack_linears(model)
    layers = [m for m in model.modules() if isinstance(m, PackedLinear)]
    with torch_linears([model]):
        assert not any(layer.enabled for layer in layers)
    assert all(layer.enabled for layer in layers)
    with pytest.raises(RuntimeError, match="baseline failed"), torch_linears([model]):
        raise RuntimeError("baseline failed")
    assert all(layer.enabled for layer in layers)


@needs_onednn
@pytest.mark.skipif(TEST_DEVICE != "cpu", reason="packing applies to a CPU only")
def test_the_runner_packs_by_default_and_greedy_tokens_do_not_change(tiny_pair: TinyPair) -> None:
    runner = load_runner(engine_config(tiny_pair, "draft", max_batch=4), progress=False).runner
    assert isinstance(runner, HFRunner)
    assert packed_layers(runner.models) > 0
    assert "linear layers packed for oneDNN" in runner.describe()
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19], [20, 21, 22, 23]]
    case = compare(runner, prompts, 3, steps=6, variants=linear_variants(), repeats=1)
    assert case.mismatched_rows == {"torch": 0, "packed": 0}


@needs_onednn
@pytest.mark.skipif(TEST_DEVICE != "cpu", reason="packing applies to a CPU only")
def test_a_bfloat16_model_loads_on_every_cpu_packed_only_where_onednn_has_bf16(tiny_pair: TinyPair) -> None:
    # oneDNN refuses to pack bf16 weights on a CPU without its bf16 instructions (AVX2 only);
    # the load must then keep torch's linears rather than fail.
    config = engine_config(tiny_pair, "draft", max_batch=2)
    config = replace(config, models=replace(config.models, dtype="bfloat16", runtime="torch"))
    runner = load_runner(config, progress=False).runner
    assert isinstance(runner, HFRunner)
    onednn_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert can_pack(torch.device("cpu"), torch.bfloat16) == onednn_bf16
    assert (packed_layers(runner.models) > 0) == onednn_bf16
    assert runner.runtime == "torch"


def test_linear_torch_leaves_the_models_as_transformers_built_them(tiny_pair: TinyPair) -> None:
    config = engine_config(tiny_pair, "draft", max_batch=2)
    config = replace(config, models=replace(config.models, linear="torch"))
    runner = load_runner(config, progress=False).runner
    assert isinstance(runner, HFRunner)
    assert packed_layers(runner.models) == 0


def test_an_unknown_linear_kind_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"linear must be one of \('packed', 'torch'\)"):
        ModelConfig(linear="fast")  # type: ignore[arg-type]
