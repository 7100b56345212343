"""Loading a runner: resolve where the models come from, refuse what cannot run exactly, load, wire."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from adaptivespec.config import EngineConfig, ModelConfig, parse_size
from adaptivespec.engine.attention import attention_implementation, check_supported
from adaptivespec.engine.cached_model import ForwardClock
from adaptivespec.engine.compiled_forward import compile_time_note, compiled_graphs
from adaptivespec.engine.copy_proposer import CopyProposer
from adaptivespec.engine.eagle3_head import Eagle3Head
from adaptivespec.engine.eagle3_proposer import Eagle3Proposer, load_head
from adaptivespec.engine.hardware import (
    hardware_key,
    resolve_device,
    resolve_dtype,
    set_threads,
    usable_cpu_ids,
    usable_cpus,
)
from adaptivespec.engine.head_cache import cached_head
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.hidden_tap import HiddenTap
from adaptivespec.engine.kv_budget import KVPlan, default_budget, plan
from adaptivespec.engine.kvcache import CacheShape
from adaptivespec.engine.model_cache import announce
from adaptivespec.engine.model_sources import ModelSource, resolve_models
from adaptivespec.engine.openvino_export import INSTALL_HINT as OPENVINO_HINT
from adaptivespec.engine.openvino_export import check_pageable, exported_model, openvino_available
from adaptivespec.engine.openvino_target import OpenVINOTarget
from adaptivespec.engine.packed_gqa import use_attention
from adaptivespec.engine.packed_linear import can_pack, pack_linears
from adaptivespec.engine.proposers import DraftModelProposer, NgramProposer, Proposer
from adaptivespec.engine.runtime_choice import choose_runtime
from adaptivespec.engine.suffix_proposer import INSTALL_HINT, SuffixProposer, suffix_available
from adaptivespec.engine.thread_governor import ThreadGovernor, read_cpu_times
from adaptivespec.errors import ConfigError, ModelLoadError


@dataclass(frozen=True, slots=True)
class LoadedModels:
    runner: HFRunner
    tokenizer: PreTrainedTokenizerBase
    target: ModelSource


def _from_pretrained(loader: Callable[..., object], name: str, **kwargs: object) -> object:
    """Local directory, or a hub id already in the local cache; the network is only a fallback."""
    try:
        return loader(name, local_files_only=True, **kwargs)
    except OSError:
        if Path(name).exists():
            raise
    try:
        return loader(name, **kwargs)
    except OSError as exc:
        raise ModelLoadError(
            f"cannot load {name!r}: it is neither a model directory nor in the hub cache "
            f"({os.environ.get('HF_HOME', '~/.cache/huggingface')}). Pass a local directory, "
            f"or download it first on a machine with network access (hf download {name})."
        ) from exc


def load_model(
    name: str,
    device: torch.device,
    dtype: torch.dtype,
    positions: int,
    *,
    attention: str = "sdpa",
    linear: str = "torch",
) -> PreTrainedModel:
    """Reads the config first, so that a model the engine cannot run is refused before its weights load."""
    config = _from_pretrained(AutoConfig.from_pretrained, name)
    if not isinstance(config, PretrainedConfig):
        raise ModelLoadError(f"{name!r} has no usable model config")
    check_supported(config, positions)
    model = _from_pretrained(
        AutoModelForCausalLM.from_pretrained,
        name,
        dtype=dtype,
        attn_implementation=attention_implementation(config),
    )
    if not isinstance(model, PreTrainedModel):
        raise ModelLoadError(f"{name!r} did not load as a causal language model")
    torch.nn.Module.to(model, device)
    model.eval()
    use_attention([model], packed=attention == "packed-gqa")
    if linear == "packed" and can_pack(device, dtype):
        pack_linears(model)
    return model


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    tokenizer = _from_pretrained(AutoTokenizer.from_pretrained, name)
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise ModelLoadError(f"{name!r} has no usable tokenizer")
    return tokenizer


def check_same_tokenizer(target: PreTrainedTokenizerBase, draft: PreTrainedTokenizerBase) -> None:
    """Speculation compares token ids, so the draft must tokenize exactly as the target does.

    Logit widths may differ (Qwen2.5-72B has 152,064 logits, Qwen2.5-0.5B 151,936, over one
    tokenizer): the proposer drafts only among the ids both models have.
    """
    hint = "pick a draft that shares the target's tokenizer, or use --proposer ngram"
    if target.get_vocab() != draft.get_vocab():
        raise ModelLoadError(f"the draft's vocabulary differs from the target's; {hint}")
    if _special_tokens(target) != _special_tokens(draft):
        raise ModelLoadError(
            f"the draft's special tokens {_special_tokens(draft)} differ from the target's "
            f"{_special_tokens(target)}; {hint}"
        )


def _special_tokens(tokenizer: PreTrainedTokenizerBase) -> dict[str, int | None]:
    names = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")
    return {name: getattr(tokenizer, name, None) for name in names}


def eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None)
        ids.update(value if isinstance(value, list) else [value] if value is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(int(i) for i in ids)


def load_runner(config: EngineConfig, progress: bool = True) -> LoadedModels:
    models = config.models
    if {"suffix", "copy"} & set(models.proposers) and not suffix_available():
        raise ConfigError(INSTALL_HINT)  # before minutes of loading, not after
    device, dtype, threads = _placed(config, progress)
    target_source, draft_source = resolve_models(models, progress)
    kinds, head_dir = _drafters(models, target_source.path, progress)
    on_openvino = _on_openvino(models, device, dtype, progress)
    positions = config.max_context + config.max_spec_tokens
    # A compiled step leaves the linears to inductor, which cannot lower oneDNN's packed op.
    linear = models.linear if models.compile == "off" else "torch"
    target = load_model(
        target_source.path,
        device,
        dtype,
        positions,
        attention=models.attention,
        linear="torch" if on_openvino else linear,  # OpenVINO runs its own copy of the weights
    )
    tokenizer = load_tokenizer(target_source.path)
    clock = ForwardClock(on_cuda=device.type == "cuda")
    cache_len = config.max_context + config.max_spec_tokens + 1
    if head_dir is not None and models.compile == "on":
        raise ConfigError("an EAGLE-3 head does not run with compile on yet; use --compile off")
    head = None if head_dir is None else load_head(head_dir, target, linear=linear)
    draft = None
    if draft_source is not None:
        draft = load_model(
            draft_source.path, device, dtype, positions, attention=models.attention, linear=linear
        )
        check_same_tokenizer(tokenizer, load_tokenizer(draft_source.path))
    configs = [m.config for m in (target, draft) if m is not None] + ([head.config] if head else [])
    kv = _kv_plan(config, configs, cache_len, device, dtype, aux=_aux_width(head))
    announce(progress, kv.describe(cache_len))
    proposers: list[Proposer] = []
    for kind in kinds:
        if kind == "eagle3" and head is not None and head_dir is not None:
            name = f"eagle3-{Path(head_dir).name}"
            proposers.append(
                Eagle3Proposer(head, target, name, max_batch=kv.rows, cache_len=cache_len, clock=clock)
            )
        elif kind == "suffix":
            proposers.append(SuffixProposer(models.suffix, kv.rows))
        elif kind == "copy":
            lookup = NgramProposer(models.ngram_max, models.ngram_min, models.ngram_unigram_drafts)
            proposers.append(CopyProposer(lookup, SuffixProposer(models.suffix, kv.rows)))
        elif kind == "ngram":
            proposers.append(NgramProposer(models.ngram_max, models.ngram_min, models.ngram_unigram_drafts))
        elif draft is not None and draft_source is not None:
            width = _logit_width(target)
            proposers.append(
                DraftModelProposer(draft, draft_source.key, kv.rows, cache_len, clock, target_width=width)
            )
    drafters = ",".join(proposer.name for proposer in proposers)
    passes = None
    if on_openvino:
        # A head's tap is fed by OpenVINO's passes; its hooks on the torch target stay, for a
        # fall back to torch.
        tap = next((p.tap for p in proposers if isinstance(p, Eagle3Proposer)), None)
        at = partial(
            _openvino, target, target_source, rows=kv.rows, cache_len=cache_len, clock=clock, tap=tap
        )
        passes = at(threads, progress) if models.runtime == "openvino" else _or_torch(at, threads, progress)
    if on_openvino and passes is None and linear == "packed" and can_pack(device, dtype):
        pack_linears(target)  # torch runs the forwards after all: as it would have from the start
    on_openvino = passes is not None
    runner = HFRunner(
        target,
        proposers,
        max_batch=kv.rows,
        max_context=config.max_context,
        max_spec_tokens=config.max_spec_tokens,
        eos_token_ids=eos_ids(target, tokenizer),
        model_key=f"{target_source.key}+{drafters}:{str(dtype).removeprefix('torch.')}",
        # The runtime changes what a step costs, so the controller learns each apart.
        hardware_key=hardware_key(device) + ("+openvino" if on_openvino else ""),
        clock=clock,
        # OpenVINO sizes its own team once, at compile: the count is pinned there.
        threads=None if device.type != "cpu" or on_openvino else _governor(config.threads, models.compile),
        passes=passes,
    )
    if models.compile == "on":
        _compile(runner, progress)
    return LoadedModels(runner, tokenizer, target_source)


def _placed(config: EngineConfig, progress: bool) -> tuple[torch.device, torch.dtype, int]:
    """Where the models run, in what precision, and on how many torch threads."""
    models = config.models
    if models.runtime == "openvino" and not openvino_available():
        raise ConfigError(OPENVINO_HINT)
    device = resolve_device("cpu" if models.runtime == "openvino" else models.device)
    dtype = resolve_dtype(models.dtype, device)
    threads = set_threads(config.threads)  # before the hardware key, which names the thread count
    if device.type == "cpu":
        capability = torch.backends.cpu.get_cpu_capability()
        announce(progress, f"torch threads: {threads} of {usable_cpus()} usable CPUs ({capability})")
        # transformers otherwise expands GQA KV heads on masked multi-token passes (several T=1 steps' cost).
        os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")
    return device, dtype, threads


def _on_openvino(models: ModelConfig, device: torch.device, dtype: torch.dtype, progress: bool) -> bool:
    """Whether OpenVINO runs the target's forwards (runtime_choice.py), said at start-up."""
    choice = choose_runtime(
        models.runtime,
        device=device,
        dtype=dtype,
        compile=models.compile,
        available=models.runtime == "auto" and device.type == "cpu" and openvino_available(),
    )
    announce(progress, choice.why)
    return choice.runtime == "openvino"


def _or_torch(
    openvino: Callable[[int, bool], OpenVINOTarget], threads: int, progress: bool
) -> OpenVINOTarget | None:
    """Runtime "auto": the target on OpenVINO, or None (torch runs it) where OpenVINO cannot
    convert or page this model; an acceleration that is not there is no reason not to serve."""
    try:
        return openvino(threads, progress)
    except Exception as exc:  # any failure of the optional runtime falls back to torch
        announce(progress, f"the target's forwards run on torch after all: OpenVINO cannot take it ({exc})")
        return None


def _openvino(
    target: PreTrainedModel,
    source: ModelSource,
    threads: int,
    progress: bool,
    *,
    rows: int,
    cache_len: int,
    clock: ForwardClock,
    tap: HiddenTap | None,
) -> OpenVINOTarget:
    check_pageable(target.config, cache_len)
    ir = exported_model(source.path, source.key, target.config, progress)
    passes = OpenVINOTarget(target, ir, rows=rows, cache_len=cache_len, clock=clock, threads=threads, tap=tap)
    announce(progress, f"the target's forwards run on OpenVINO ({ir.parent.name})")
    return passes


def _governor(asked: int, compile: str) -> ThreadGovernor | None:
    """Threads left to the engine (0) follow the CPUs other processes leave free; a number
    asked for is kept, and so is the count a compiled step was built for (inductor writes the
    team size into its kernels at compile time)."""
    if asked or compile == "on":
        return None
    cpus = usable_cpu_ids()
    return ThreadGovernor(len(cpus), partial(read_cpu_times, cpus))


def _drafters(models: ModelConfig, target_dir: str, progress: bool) -> tuple[tuple[str, ...], str | None]:
    """The drafters to load, "auto" resolved, and the EAGLE-3 head's directory if one drafts.

    "auto" loads every drafter this host can run for the target, and the controller chooses
    per step which one drafts (or none): the cached head first (it pays on open text), then
    the copying drafters, prompt lookup and suffix decoding, as one (`copy`: each row takes
    the longer of their drafts, copy_proposer.py), or prompt lookup alone where
    arctic-inference is not installed. A row's choice between the two follows its request,
    where the controller's, per step for the whole batch, flips as requests change and costs it
    twice the arms to learn (docs/decisions.md, 2026-12-06, third and fourth entries). The
    copying drafters cost nothing on a step that does not run them beyond drafting in the
    head's shadow (shadow_drafts.py)."""
    if models.proposers == ("auto",):
        # A compiled step cannot keep the head's states yet (loader refuses eagle3 with compile on).
        cached = cached_head(target_dir) if models.compile == "off" else None
        cheap = ("copy",) if suffix_available() else ("ngram",)
        kinds = (("eagle3",) if cached else ()) + cheap
        named = {
            "eagle3": f"the EAGLE-3 head trained for this target ({cached})",
            "ngram": "prompt lookup",
            "copy": "prompt lookup and suffix decoding (each row the longer draft)",
        }
        said = "drafting with " + ", ".join(named.get(kind, kind) for kind in kinds)
        said += ", the controller choosing per step " + ("which drafts, and K" if len(kinds) > 1 else "K")
        if not cached:
            said += (
                "; `adaptivespec train-draft` builds an EAGLE-3 head for this target, which serve then "
                "uses (with --compile off)"
            )
        if "copy" not in kinds:
            said += "; ops/install-suffix.sh adds suffix decoding"
        announce(progress, said)
        return kinds, None if cached is None else str(cached)
    return models.proposers, models.draft if "eagle3" in models.proposers else None


def _aux_width(head: Eagle3Head | None) -> int:
    """What an EAGLE-3 head keeps per position beside the KV: the target's states it reads."""
    if head is None or head.spec.aux_layers is None:
        return 0
    return len(head.spec.aux_layers) * head.hidden_size


def _kv_plan(
    config: EngineConfig,
    configs: list[PretrainedConfig],
    cache_len: int,
    device: torch.device,
    dtype: torch.dtype,
    *,
    aux: int = 0,
) -> KVPlan:
    """The rows the KV budget buys for every model the step runs (a draft or head keeps a cache
    too, and a head the target's states at its `aux` width per position)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    row_bytes = sum(CacheShape.from_config(c, 1, cache_len).row_bytes(dtype) for c in configs)
    row_bytes += aux * cache_len * itemsize
    budget = parse_size(config.kv_cache_memory) or default_budget(device)
    return plan(budget, config.max_batch, row_bytes, cache_len)


def _compile(runner: HFRunner, progress: bool) -> None:
    began, graphs = time.perf_counter(), compiled_graphs()
    announce(
        progress,
        "compiling the decode step (torch.compile: up to 8 graphs, about a minute each on a small CPU)",
    )
    runner.compile()
    announce(progress, f"decode step ready: {compile_time_note(began, graphs)}")


def _logit_width(model: PreTrainedModel) -> int:
    return int(model.get_output_embeddings().weight.shape[0])
