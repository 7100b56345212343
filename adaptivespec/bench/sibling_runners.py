"""Runners that share one loaded target's weights, each with its own drafter, so that benches
compare drafters side by side in one process without loading the model twice."""

from __future__ import annotations

from adaptivespec.config import EngineConfig, SuffixSettings
from adaptivespec.engine.copy_proposer import CopyProposer
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.proposers import NgramProposer, Proposer
from adaptivespec.engine.suffix_proposer import SuffixProposer
from adaptivespec.engine.target_passes import TargetPasses

# "suffix-local": suffix with no global tree (max_cached_requests 0), its per-request trees only;
# "copy": each row's longer draft of the two (copy_proposer.py).
MODEL_FREE = ("ngram", "suffix", "suffix-local", "copy")


def model_free_proposer(name: str, config: EngineConfig) -> Proposer | None:
    """The drafter `name` (one of MODEL_FREE, or "off": none), with the config's settings."""
    models = config.models
    if name == "off":
        return None
    if name == "ngram":
        return NgramProposer(models.ngram_max, models.ngram_min, models.ngram_unigram_drafts)
    if name == "suffix":
        return SuffixProposer(models.suffix, config.max_batch)
    if name == "copy":
        lookup = NgramProposer(models.ngram_max, models.ngram_min, models.ngram_unigram_drafts)
        return CopyProposer(lookup, SuffixProposer(models.suffix, config.max_batch))
    if name == "suffix-local":
        s = models.suffix
        return SuffixProposer(
            SuffixSettings(s.max_tree_depth, 0, s.max_spec_factor, s.min_token_prob), config.max_batch
        )
    raise ValueError(f"unknown drafter {name!r}: choose among off, {', '.join(MODEL_FREE)}")


def sibling(
    base: HFRunner, proposer: Proposer | None, config: EngineConfig, passes: TargetPasses | None = None
) -> HFRunner:
    """A fresh runner (its own KV cache and rows) on `base`'s target weights; `passes`: the
    target's forwards on another runtime than torch's (its own cache too)."""
    return HFRunner(
        base.target.model,
        [] if proposer is None else [proposer],
        max_batch=config.max_batch,
        max_context=config.max_context,
        max_spec_tokens=config.max_spec_tokens,
        eos_token_ids=base.eos_token_ids,
        model_key=base.model_key,
        hardware_key=base.hardware_key,
        clock=base.clock,
        passes=passes,
    )
