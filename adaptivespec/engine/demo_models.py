"""The embedded demo pair: a ~21M GQA target and a ~2.4M draft, trained here, offline.

No weights can be downloaded on our machines, so the default daemon builds its own pair
from text every machine has (the Python standard library sources), deterministically,
and caches it. The draft trains alongside the target and distils from its logits, which
come for free in the same step; agreement with the target is what speculation pays on.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from adaptivespec.engine.hardware import native_cpu_bf16
from adaptivespec.engine.model_cache import announce, build_once, cache_dir

EOS = "<|endoftext|>"
RECIPE_VERSION = "v1"


@dataclass(frozen=True, slots=True)
class ModelSize:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


@dataclass(frozen=True, slots=True)
class DemoRecipe:
    vocab_size: int = 8192
    corpus_bytes: int = 12_000_000
    target: ModelSize = field(default_factory=lambda: ModelSize(512, 6, 8, 2, 1408))
    draft: ModelSize = field(default_factory=lambda: ModelSize(192, 2, 3, 1, 512))
    seq_len: int = 128
    batch: int = 24
    steps: int = 320
    lr: float = 2e-3
    distill_weight: float = 0.5
    eval_tokens: int = 16_384
    seed: int = 0
    train_dtype: str = "float32"  # "bfloat16" only where the CPU computes it natively

    @classmethod
    def for_this_machine(cls) -> DemoRecipe:
        """bf16 autocast where the CPU has native bf16; elsewhere fp32 (emulated bf16 matmuls are
        orders of magnitude slower).

        An fp32 step costs more than a native bf16 one, so the fp32 recipe trains a smaller target
        for fewer steps, to stay well under the test suite's time budget.
        """
        if native_cpu_bf16():
            return cls(train_dtype="bfloat16")
        return cls(train_dtype="float32", target=ModelSize(384, 4, 6, 2, 1024), steps=280)

    @property
    def key(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:8]
        return f"demo-{RECIPE_VERSION}-{self.train_dtype}-{digest}"


@dataclass(frozen=True, slots=True)
class TrainedPair:
    tokenizer: PreTrainedTokenizerFast
    target: LlamaForCausalLM
    draft: LlamaForCausalLM

    def save(self, target_dir: Path, draft_dir: Path) -> None:
        for directory, model in ((target_dir, self.target), (draft_dir, self.draft)):
            model.save_pretrained(directory)
            self.tokenizer.save_pretrained(directory)


@dataclass(frozen=True, slots=True)
class DemoPair:
    target: Path
    draft: Path
    report: dict[str, float]


def ensure_demo_pair(
    recipe: DemoRecipe | None = None, root: Path | None = None, progress: bool = True
) -> DemoPair:
    """Returns the cached pair, building it first if needed (one builder at a time)."""
    recipe = recipe or DemoRecipe.for_this_machine()
    home = build_once(
        (root or cache_dir()) / recipe.key, "report.json", lambda staging: _build(recipe, staging, progress)
    )
    report = json.loads((home / "report.json").read_text())
    return DemoPair(home / "target", home / "draft", report)


def _build(recipe: DemoRecipe, staging: Path, progress: bool) -> None:
    began = time.monotonic()
    announce(
        progress,
        f"building the demo model pair (first use only; training in {recipe.train_dtype}, "
        "about 10 minutes on 2 cores)",
    )
    train_docs, held_out_docs = _corpus(recipe.corpus_bytes)
    pair = train_pair(recipe, train_docs, progress)
    held_out = _encode(pair.tokenizer, held_out_docs)[: recipe.eval_tokens + 1]
    report = evaluate_pair(pair, held_out, recipe.seq_len)
    report["build_seconds"] = time.monotonic() - began
    report["target_params"] = float(sum(p.numel() for p in pair.target.parameters()))
    report["draft_params"] = float(sum(p.numel() for p in pair.draft.parameters()))
    pair.save(staging / "target", staging / "draft")
    (staging / "report.json").write_text(json.dumps(report, indent=2))
    announce(
        progress,
        f"demo pair ready in {report['build_seconds']:.0f}s: greedy agreement {report['agreement']:.3f}",
    )


def held_out_documents(recipe: DemoRecipe | None = None) -> list[str]:
    """Standard-library files the demo pair never trained on, for benchmarks and acceptance."""
    return _corpus((recipe or DemoRecipe()).corpus_bytes)[1]


def training_documents(recipe: DemoRecipe | None = None) -> list[str]:
    """The standard-library files `held_out_documents` leaves out: text a drafter may train on."""
    return _corpus((recipe or DemoRecipe()).corpus_bytes)[0]


def _corpus(limit: int) -> tuple[list[str], list[str]]:
    """Standard-library sources in a fixed order; every 20th file (by name hash) is held out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    train: list[str] = []
    held_out: list[str] = []
    size = 0
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        rel = str(path.relative_to(root))
        bucket = held_out if int(hashlib.md5(rel.encode()).hexdigest(), 16) % 20 == 0 else train
        bucket.append(text)
        size += len(text)
        if size >= limit:
            break
    return train, held_out


def train_pair(recipe: DemoRecipe, docs: list[str], progress: bool = False) -> TrainedPair:
    """Trains a tokenizer, then the target and the draft together, deterministically."""
    torch.manual_seed(recipe.seed)
    tokenizer = train_tokenizer(docs, recipe.vocab_size)
    tokens = _encode(tokenizer, docs)
    announce(progress, f"corpus: {tokens.numel():,} training tokens")
    target = LlamaForCausalLM(_llama_config(recipe.target, recipe, tokenizer))
    draft = LlamaForCausalLM(_llama_config(recipe.draft, recipe, tokenizer))
    _train(recipe, target, draft, tokens, progress)
    return TrainedPair(tokenizer, target, draft)


def train_tokenizer(docs: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)


def _eos_id(tokenizer: PreTrainedTokenizerFast) -> int:
    eos = tokenizer.convert_tokens_to_ids(EOS)
    if not isinstance(eos, int):
        raise TypeError(f"{EOS} must map to one token id")
    return eos


def _encode(tokenizer: PreTrainedTokenizerFast, docs: list[str]) -> torch.Tensor:
    eos = _eos_id(tokenizer)
    ids: list[int] = []
    for encoding in tokenizer.backend_tokenizer.encode_batch(docs):
        ids.extend(encoding.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def _llama_config(size: ModelSize, recipe: DemoRecipe, tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    eos = _eos_id(tokenizer)
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        head_dim=size.hidden // size.heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )


def _batches(tokens: torch.Tensor, recipe: DemoRecipe) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(recipe.seed)
    span = recipe.seq_len + 1
    while True:
        starts = torch.randint(0, tokens.numel() - span, (recipe.batch,), generator=generator)
        yield torch.stack([tokens[s : s + span] for s in starts.tolist()])


def _lr(step: int, recipe: DemoRecipe) -> float:
    warmup = max(1, recipe.steps // 20)
    if step < warmup:
        return recipe.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, recipe.steps - warmup)
    return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _train(
    recipe: DemoRecipe,
    target: LlamaForCausalLM,
    draft: LlamaForCausalLM,
    tokens: torch.Tensor,
    progress: bool,
) -> None:
    target.train()
    draft.train()
    opt_t = torch.optim.AdamW(target.parameters(), lr=recipe.lr, weight_decay=0.1, betas=(0.9, 0.95))
    opt_d = torch.optim.AdamW(draft.parameters(), lr=recipe.lr, weight_decay=0.1, betas=(0.9, 0.95))
    bar = tqdm(range(recipe.steps), desc="training demo pair", disable=not progress, file=sys.stderr)
    batches = _batches(tokens, recipe)
    for step in bar:
        batch = next(batches)
        inputs, labels = batch[:, :-1], batch[:, 1:]
        for opt in (opt_t, opt_d):
            for group in opt.param_groups:
                group["lr"] = _lr(step, recipe)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=recipe.train_dtype == "bfloat16"):
            t_logits = target(input_ids=inputs).logits.float()
            d_logits = draft(input_ids=inputs).logits.float()
        t_loss = F.cross_entropy(t_logits.flatten(0, 1), labels.flatten())
        teacher = F.softmax(t_logits.detach(), dim=-1)
        kd = F.kl_div(F.log_softmax(d_logits, dim=-1), teacher, reduction="batchmean") / recipe.seq_len
        d_ce = F.cross_entropy(d_logits.flatten(0, 1), labels.flatten())
        d_loss = (1 - recipe.distill_weight) * d_ce + recipe.distill_weight * kd
        for opt, loss, model in ((opt_t, t_loss, target), (opt_d, d_loss, draft)):
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        bar.set_postfix(target=f"{t_loss.item():.2f}", draft=f"{d_ce.item():.2f}")
    target.eval()
    draft.eval()


@torch.inference_mode()
def evaluate_pair(pair: TrainedPair, tokens: torch.Tensor, seq_len: int) -> dict[str, float]:
    """Teacher-forced held-out loss, and how often the draft's argmax equals the target's."""
    target, draft = pair.target, pair.draft
    usable = (tokens.numel() - 1) // seq_len * seq_len
    inputs = tokens[:usable].view(-1, seq_len)
    labels = tokens[1 : usable + 1].view(-1, seq_len)
    t_logits = target(input_ids=inputs).logits
    d_logits = draft(input_ids=inputs).logits
    agreement = (t_logits.argmax(-1) == d_logits.argmax(-1)).float().mean().item()
    return {
        "agreement": agreement,
        "target_loss": F.cross_entropy(t_logits.flatten(0, 1), labels.flatten()).item(),
        "draft_loss": F.cross_entropy(d_logits.flatten(0, 1), labels.flatten()).item(),
    }
