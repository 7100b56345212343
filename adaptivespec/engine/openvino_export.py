"""A transformers causal LM converted once to OpenVINO, for the `openvino` runtime.

The conversion traces the model with transformers' own modeling code (plain SDPA attention,
plain linears; openvino_trace.py), its KV cache fed in and returned as tensors, and saves it
as a stateful model: the form OpenVINO's paged-attention pass rewrites. That pass is applied
at load (a rewritten model does not serialize), and turns every attention into OpenVINO's
PagedAttention, whose inputs are the cache blocks, each sequence's past length and where its
tokens start: what continuous batching and a multi-token verify need (openvino_target.py).
Weights stay f32, the model is cached by its content, and optimum-intel is not needed (it
pins an older transformers than ours). A model whose attention the paged pass would change
(a sliding window a row can outgrow) is refused before it is converted (`check_pageable`).

The trace also returns every layer's input (and the final norm's), the states an EAGLE-3
head reads. Which of them a served model returns is chosen at load, when the head is known;
the rest are dropped from the graph then, so a target served without a head computes what
it computed before.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from adaptivespec.engine.attention import AttentionSpec
from adaptivespec.engine.kvcache import CacheShape
from adaptivespec.engine.model_cache import announce, build_once, cache_dir
from adaptivespec.engine.openvino_trace import Traced, traced_attention
from adaptivespec.errors import ConfigError

INSTALL_HINT = "the openvino runtime needs OpenVINO: pip install -e '.[openvino]' (or pip install openvino)"
IR_FILE = "model.xml"
# CPU PagedAttention reads its cache in blocks of this many tokens.
BLOCK_SIZE = 32
# What the trace returns and how; part of the cache key, so that an IR converted before a
# change is converted again instead of read with names it does not have, or served slower.
EXPORT_FORMAT = "3: logits, present keys and values, then each reading point's state; plain SDPA, no mask"
STATE_PREFIX = "state."


def openvino_available() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def check_pageable(config: PretrainedConfig, cache_len: int) -> None:
    """Refuses what OpenVINO's paged attention would compute other than the model does.

    The paged pass gives every attention each sequence's plain causality: a sliding window
    that can bind within `cache_len` (the longest a row gets) would be dropped, and the
    tokens would silently differ from the model's. Raised as ConfigError, which runtime
    "auto" answers by running the model on torch."""
    window = AttentionSpec.from_config(config).window
    if window is not None and window < cache_len:
        raise ConfigError(
            f"the openvino runtime cannot run {type(config).__name__} past its sliding window of "
            f"{window} tokens (rows here reach {cache_len}): OpenVINO's paged attention would "
            "attend to the whole context; use --runtime torch, or a --max-context that keeps a row "
            "(prompt, output and drafts) within the window"
        )


def exported_model(model_path: str, model_key: str, config: PretrainedConfig, progress: bool = True) -> Path:
    """The cached stateful IR of the model at `model_path`, converting it on first use."""
    if not openvino_available():
        raise ConfigError(INSTALL_HINT)
    import openvino as ov

    fingerprint = _fingerprint(model_path, f"{ov.get_version()} {EXPORT_FORMAT}")
    home = cache_dir() / "openvino-runtime" / f"{_safe(model_key)}-{fingerprint}"

    def build(staging: Path) -> None:
        announce(progress, f"converting {model_key} to OpenVINO (once; cached in {home})")
        model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch.float32, attn_implementation="sdpa", local_files_only=True
        )
        ov_model = convert(cast(PreTrainedModel, model.eval()), config)
        ov.save_model(ov_model, staging / IR_FILE, compress_to_fp16=False)
        (staging / "source.json").write_text(json.dumps({"model": model_key, "path": model_path}))

    return build_once(home, IR_FILE, build) / IR_FILE


def convert(model: PreTrainedModel, config: PretrainedConfig) -> Any:
    """Traces `model` (f32, sdpa attention) into a stateful OpenVINO model."""
    import openvino as ov
    import openvino._offline_transformations as passes

    shape = CacheShape.from_config(config, 2, 4)
    n, t, past = 2, 3, 4
    past_kv = [torch.zeros(n, shape.kv_heads, past, shape.head_dim) for _ in range(2 * shape.num_layers)]
    example = (
        torch.ones(n, t, dtype=torch.long),
        torch.arange(past, past + t).expand(n, t).clone(),
        torch.arange(n, dtype=torch.int32),
        *past_kv,
    )
    traced = Traced(model)
    with torch.no_grad(), traced_attention(model), warnings.catch_warnings():
        # The trace fixes transformers' shape checks (whether a pass has one query token, and
        # so on) at the example's shapes, and says so for each. Those branches pick the sdpa
        # call, which the paged pass replaces at load with PagedAttention for every shape; an
        # operator's first start would show them as alarms about a graph that is not served.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # type: ignore[attr-defined]
        ov_model = ov.convert_model(traced, example_input=example)
    layers = [f"{i}.{kind}" for i in range(shape.num_layers) for kind in ("key", "value")]
    names = ["input_ids", "position_ids", "beam_idx"]
    names += [f"past_key_values.{x}" for x in layers]
    for port, name in zip(ov_model.inputs, names, strict=True):  # the paged pass finds inputs by name
        port.get_tensor().set_names({name})
        port.get_node().set_friendly_name(name)
    outputs = (
        ["logits"]
        + [f"present.{x}" for x in layers]
        + [f"{STATE_PREFIX}{i}" for i in range(len(traced.points))]
    )
    for port, name in zip(ov_model.outputs, outputs, strict=True):
        port.get_tensor().set_names({name})
    passes.apply_make_stateful_transformation(
        ov_model, {f"past_key_values.{x}": f"present.{x}" for x in layers}
    )
    _give_states_an_initializer(ov_model, shape)
    return ov_model


def _give_states_an_initializer(ov_model: Any, shape: CacheShape) -> None:
    """The paged pass matches a past read from a state that has an initial value, as optimum's
    exports have; the value itself is never used (the pass removes the states)."""
    import openvino as ov
    from openvino import opset6

    variables = {v.info.variable_id: v for v in ov_model.get_variables()}
    empty = np.zeros((1, shape.kv_heads, 0, shape.head_dim), dtype=np.float32)
    for node in ov_model.get_ops():
        if node.get_type_name() == "ReadValue" and node.get_input_size() == 0:
            read = opset6.read_value(ov.opset13.constant(empty), variables[node.get_variable_id()])
            node.output(0).replace(read.output(0))


def paged_model(ir: Path, config: PretrainedConfig, states: tuple[int, ...] = ()) -> Any:
    """The exported model with paged attention, f32 cache blocks of BLOCK_SIZE tokens, and a
    `logits_indices` input choosing the tokens whose logits the head computes. Its outputs are
    the logits, then the states of the reading points in `states` (an EAGLE-3 head's auxiliary
    layer ids), each [tokens, 1, hidden] for every token fed in, in order."""
    import openvino as ov
    import openvino._offline_transformations as passes
    import openvino.opset13 as opset

    ov_model = ov.Core().read_model(ir)
    _keep_states(ov_model, states)
    passes.paged_attention_transformation(ov_model)
    if any(node.get_type_name() == "ScaledDotProductAttention" for node in ov_model.get_ops()):
        raise ConfigError(
            f"the openvino runtime cannot run {type(config).__name__}: OpenVINO's paged attention "
            "did not recognise its attention; use --runtime torch"
        )
    f32_blocks(ov_model, config)
    # Only the tokens a step samples from need the vocabulary projection: gather their hidden
    # states before the head's matmul (a 1,500-token prompt would otherwise project every token).
    head = ov_model.outputs[0].get_node().input_value(0).get_node()
    while head.get_type_name() != "MatMul":
        if head.get_input_size() == 0:
            raise ConfigError(
                f"the openvino runtime found no vocabulary matmul in {type(config).__name__}; "
                "use --runtime torch"
            )
        head = head.input_value(0).get_node()
    indices = opset.parameter([-1], ov.Type.i64, name="logits_indices")
    indices.output(0).get_tensor().set_names({"logits_indices"})
    hidden = head.input_value(0)
    head.input(0).replace_source_output(opset.gather(hidden, indices, np.int64(0)).output(0))
    ov_model.add_parameters([indices])
    ov_model.validate_nodes_and_infer_types()
    return ov_model


def f32_blocks(ov_model: Any, config: PretrainedConfig) -> None:
    """A paged model's cache inputs as the runtime keeps them: f32 blocks of BLOCK_SIZE tokens."""
    import openvino as ov

    shape = CacheShape.from_config(config, 1, 1)
    for port in ov_model.inputs:
        if port.get_any_name().startswith(("key_cache.", "value_cache.")):
            parameter = port.get_node()
            parameter.set_element_type(ov.Type.f32)
            parameter.set_partial_shape(ov.PartialShape([-1, shape.kv_heads, BLOCK_SIZE, shape.head_dim]))


def _keep_states(ov_model: Any, wanted: tuple[int, ...]) -> None:
    """Drops the state outputs not in `wanted`, and orders the rest as `wanted` does."""
    found = {
        int(port.get_any_name().removeprefix(STATE_PREFIX)): port.get_node()
        for port in ov_model.outputs
        if port.get_any_name().startswith(STATE_PREFIX)
    }
    missing = [i for i in wanted if i not in found]
    if missing:
        raise ConfigError(
            f"the converted model has no state at reading point(s) {missing} (it has {len(found)}); "
            "the head was trained for a deeper target"
        )
    for result in found.values():
        ov_model.remove_result(result)
    ov_model.add_results([found[i] for i in wanted])


def _fingerprint(model_path: str, runtime_version: str) -> str:
    """Weights and config by content, and the OpenVINO that converted them."""
    digest = hashlib.sha256(runtime_version.encode())
    folder = Path(model_path)
    files = [*sorted(folder.glob("*.safetensors")), *sorted(folder.glob("*.bin")), folder / "config.json"]
    for file in files:
        if file.exists():
            digest.update(file.name.encode())
            with open(file, "rb") as handle:
                while block := handle.read(1 << 24):
                    digest.update(block)
    return digest.hexdigest()[:12]


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
