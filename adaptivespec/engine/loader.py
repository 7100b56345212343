"""Loading target and draft models: local directories, hub ids from the local cache, or the demo pair."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from adaptivespec.config import DEMO_MODEL, EngineConfig, ModelConfig
from adaptivespec.engine.cached_model import ForwardClock
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.proposers import DraftModelProposer, NgramProposer, Proposer
from adaptivespec.errors import ModelLoadError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True, slots=True)
class LoadedModels:
    runner: HFRunner
    tokenizer: PreTrainedTokenizerBase


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(
            "device 'cuda' was asked for, but torch sees no CUDA GPU; use --device cpu or auto"
        )
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[name]


def hardware_key(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{_cpu_model_name()}:{torch.get_num_threads()}"


def _cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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


def load_model(name: str, device: torch.device, dtype: torch.dtype) -> PreTrainedModel:
    model = _from_pretrained(
        AutoModelForCausalLM.from_pretrained, name, dtype=dtype, attn_implementation="sdpa"
    )
    if not isinstance(model, PreTrainedModel):
        raise ModelLoadError(f"{name!r} did not load as a causal language model")
    window = getattr(model.config, "sliding_window", None)
    if window and getattr(model.config, "use_sliding_window", True):
        raise ModelLoadError(
            f"{name!r} uses sliding-window attention, which the slot KV cache does not support yet"
        )
    torch.nn.Module.to(model, device)
    model.eval()
    return model


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    tokenizer = _from_pretrained(AutoTokenizer.from_pretrained, name)
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise ModelLoadError(f"{name!r} has no usable tokenizer")
    return tokenizer


def check_same_vocabulary(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    tok_target: PreTrainedTokenizerBase,
    tok_draft: PreTrainedTokenizerBase,
) -> None:
    """Speculation compares token ids, so a draft with another vocabulary would be silently wrong."""
    t_size, d_size = (
        target.get_output_embeddings().weight.shape[0],
        draft.get_output_embeddings().weight.shape[0],
    )
    if t_size != d_size:
        raise ModelLoadError(
            f"draft vocabulary has {d_size} logits but the target has {t_size}; "
            "pick a draft trained with the target's tokenizer, or use --proposer ngram"
        )
    if tok_target.get_vocab() != tok_draft.get_vocab():
        raise ModelLoadError(
            "draft tokenizer differs from the target's (same size, different tokens); "
            "pick a draft trained with the target's tokenizer, or use --proposer ngram"
        )


def eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None)
        ids.update(value if isinstance(value, list) else [value] if value is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(int(i) for i in ids)


def model_paths(models: ModelConfig, progress: bool = True) -> tuple[str, str | None]:
    """Replaces 'demo' by the demo pair's directories, building them on first use."""
    if DEMO_MODEL not in (models.target, models.draft):
        return models.target, models.draft
    from adaptivespec.engine.demo_models import ensure_demo_pair

    pair = ensure_demo_pair(progress=progress)
    target = str(pair.target) if models.target == DEMO_MODEL else models.target
    draft = str(pair.draft) if models.draft == DEMO_MODEL else models.draft
    return target, draft


def load_runner(config: EngineConfig, progress: bool = True) -> LoadedModels:
    models = config.models
    device = resolve_device(models.device)
    dtype = resolve_dtype(models.dtype, device)
    if device.type == "cpu":
        # transformers otherwise expands GQA KV heads on masked multi-token passes (~3x a T=1 step).
        os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")
    target_name, draft_name = model_paths(models, progress)
    target = load_model(target_name, device, dtype)
    tokenizer = load_tokenizer(target_name)
    clock = ForwardClock(sync=device.type == "cuda")
    cache_len = config.max_context + config.max_spec_tokens + 1
    proposer: Proposer
    if models.proposer == "ngram":
        proposer = NgramProposer(models.ngram_max, models.ngram_min)
    else:
        if draft_name is None:
            raise ModelLoadError("proposer 'draft' needs --draft PATH (or use --proposer ngram)")
        draft = load_model(draft_name, device, dtype)
        check_same_vocabulary(target, draft, tokenizer, load_tokenizer(draft_name))
        proposer = DraftModelProposer(draft, _short(draft_name), config.max_batch, cache_len, clock)
    runner = HFRunner(
        target,
        proposer,
        max_batch=config.max_batch,
        max_context=config.max_context,
        max_spec_tokens=config.max_spec_tokens,
        eos_token_ids=eos_ids(target, tokenizer),
        model_key=f"{_short(target_name)}+{proposer.name}:{str(dtype).removeprefix('torch.')}",
        hardware_key=hardware_key(device),
        clock=clock,
    )
    return LoadedModels(runner, tokenizer)


def _short(name: str) -> str:
    path = Path(name)
    if not path.exists():
        return name
    return f"demo-{path.name}" if path.parent.name.startswith("demo-") else path.name
