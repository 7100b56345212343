"""`adaptivespec train-draft --target TARGET [--out DIR]`: an EAGLE-3 head for a target, built here.

1. Prompts from local text (corpus.py); the serving engine writes the target's continuations
   (continuations.py), and the target records what the head learns from (teacher.py), shard
   by shard, for as many groups of prompts as the teacher's share of the budget holds
   (budget.py).
2. The draft vocabulary: the ids that text uses most.
3. The head trains on the shards (head_trainer.py) for as many steps as the rest of the
   budget holds, checkpointed every minute.
4. It is written in the speculators format, into the cache under the target's content
   (head_cache.py), where `serve --proposer auto` finds it, or into --out.

Everything in between lives in a work folder beside the result, so an interrupted run picks
up where it stopped; a finished head is not built again. Progress goes to stderr; the last
line on stdout is the head's directory.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from adaptivespec.config import ModelConfig
from adaptivespec.engine.eagle3_format import Eagle3Spec, write_head
from adaptivespec.engine.eagle3_head import embedding_rows
from adaptivespec.engine.hardware import native_cpu_bf16, set_threads
from adaptivespec.engine.head_cache import head_home
from adaptivespec.engine.loader import load_model, load_tokenizer
from adaptivespec.engine.model_cache import announce
from adaptivespec.engine.model_sources import resolve_models
from adaptivespec.errors import AdaptiveSpecError
from adaptivespec.train.budget import Budget, Plan, repace_after, seconds_per_step
from adaptivespec.train.command_args import DRAFT_VOCAB, NEW_TOKENS, PROMPTS
from adaptivespec.train.continuations import Continuations, ContinuationWriter
from adaptivespec.train.corpus import training_prompts
from adaptivespec.train.head_trainer import HeadTrainer, TrainSettings, draft_vocabulary, head_spec, new_head
from adaptivespec.train.teacher import Shard, Teacher


@dataclass(frozen=True, slots=True)
class DataSettings:
    prompts: int = PROMPTS  # at most: a budget may stop the teacher sooner
    new_tokens: int = NEW_TOKENS  # the target's continuation of each prompt
    batch: int = 16  # sequences recorded in one forward: one shard
    group: int = 8  # shards whose prompts the engine continues together (the unit of resuming)
    draft_vocab: int = DRAFT_VOCAB
    seed: int = 0
    text: Path | None = None  # prompts from this file instead of the standard library

    def __post_init__(self) -> None:
        if min(self.prompts, self.new_tokens, self.batch, self.group, self.draft_vocab) < 1:
            raise ValueError(f"train-draft settings must be positive: {self}")


def run(args: argparse.Namespace) -> Path:
    _check_flags(args)
    data = DataSettings(
        args.prompts, args.new_tokens, draft_vocab=args.draft_vocab, seed=args.seed, text=args.text
    )
    fit = TrainSettings(epochs=args.epochs, lr=args.lr, seed=args.seed, bf16=native_cpu_bf16())
    budget = Budget(args.minutes * 60) if args.minutes > 0 else None
    threads = set_threads(args.threads)
    try:
        home = train_draft(args.target, args.out, data, fit, threads=threads, budget=budget)
    except KeyboardInterrupt:
        raise AdaptiveSpecError(
            "train-draft interrupted; run the same command again to resume where it stopped"
        ) from None
    print(home, flush=True)
    return home


def _check_flags(args: argparse.Namespace) -> None:
    """Each flag's own mistake named before a model loads (minutes of work otherwise)."""
    for flag in ("prompts", "new_tokens", "draft_vocab", "epochs", "lr"):
        if not getattr(args, flag) > 0:
            raise AdaptiveSpecError(f"--{flag.replace('_', '-')} must be positive, not {getattr(args, flag)}")
    if args.minutes < 0:
        raise AdaptiveSpecError(f"--minutes must be 0 (no budget) or more, not {args.minutes}")


def _read_text(path: Path | None) -> str | None:
    """The --text file's text, read before any model loads, or None for the standard library's."""
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AdaptiveSpecError(
            f"--text {path} cannot be read as UTF-8 text ({exc}); pass a readable text file, "
            "or leave --text out to train on the standard library's text"
        ) from exc


def train_draft(
    target_name: str,
    out: Path | None,
    data: DataSettings,
    fit: TrainSettings,
    *,
    progress: bool = True,
    threads: int = 0,
    budget: Budget | None = None,
) -> Path:
    """The head's directory; with a `budget`, `data.prompts` and `fit.epochs` are caps that
    the budget may stop short of (budget.py)."""
    text = _read_text(data.text)
    source, _ = resolve_models(ModelConfig(target=target_name, proposer="ngram"), progress)
    home = out or head_home(source.path)
    if (home / "config.json").is_file():
        announce(progress, f"an EAGLE-3 head for this target is already built: {home}")
        return home
    work = home.with_name(home.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    target = load_model(source.path, torch.device("cpu"), torch.float32, 1, attention="sdpa", linear="torch")
    tokenizer = load_tokenizer(source.path)
    vocab = embedding_rows(target)
    spec = head_spec(target, min(data.draft_vocab, vocab), source.path)
    began = time.perf_counter()
    prompts = training_prompts(tokenizer, data.prompts, data.seed, text=text)
    continuations = Continuations(target_name, threads, max(len(p) for p in prompts), data.new_tokens)
    teacher = Teacher(target, spec.aux_layers or (), bf16=fit.bf16)
    plan = Plan(work / "plan.json")
    shards = _teach(teacher, continuations, prompts, data, work, plan=plan, budget=budget, progress=progress)
    ids = _vocabulary(shards, spec, vocab, work)
    head = new_head(spec, target, ids, data.seed)
    trainer = HeadTrainer(head, target.get_input_embeddings(), fit)
    _plan_steps(trainer, shards, plan, budget, progress)
    _fit(trainer, shards, work, plan, budget, progress=progress)
    write_head(home, spec, head.weights(), speculative_tokens=4)
    size = sum(t.numel() * t.element_size() for t in head.weights().values())
    minutes = (time.perf_counter() - began) / 60
    announce(
        progress,
        f"EAGLE-3 head written to {home} ({size / 2**20:.1f} MiB) after {minutes:.1f} min here; "
        f"serve it with --draft {home} --proposer eagle3 (or --proposer auto)",
    )
    return home


def _teach(
    teacher: Teacher,
    continuations: Continuations,
    prompts: list[list[int]],
    data: DataSettings,
    work: Path,
    *,
    plan: Plan,
    budget: Budget | None,
    progress: bool,
) -> list[Shard]:
    """The shards, made group by group where a run before this one did not make them, while
    the budget's teacher share holds another group (the plan keeps where it stopped)."""
    per_group = data.batch * data.group
    groups = [prompts[i : i + per_group] for i in range(0, len(prompts), per_group)]
    writer: ContinuationWriter | None = None
    shards: list[Shard] = []
    began, made, taken = time.perf_counter(), 0, 0
    announce(
        progress,
        f"teacher: the target continues {len(prompts)} prompts ({data.new_tokens} tokens each) "
        f"in {len(groups)} groups of up to {per_group}, then records its states over them",
    )
    for g, group in enumerate(groups):
        if plan.groups is not None and g >= plan.groups:
            break
        paths = [work / f"shard-{g:04d}-{j}.pt" for j in range(-(-len(group) // data.batch))]
        if not all(path.exists() for path in paths):
            if budget is not None and not budget.another_group_fits(plan.teacher_seconds, plan.groups_made):
                announce(
                    progress,
                    f"teacher: stops after {g} of {len(groups)} groups, at its share of the "
                    f"{budget.seconds / 60:g}-minute budget (--minutes)",
                )
                break
            group_began = time.perf_counter()
            if writer is None:  # a resumed run with every shard made never loads the engine
                writer = ContinuationWriter(continuations, progress=False)
            sequences = writer.write(group, first_index=g * per_group, seed=data.seed)
            with torch.inference_mode():
                for j, path in enumerate(paths):
                    teacher.record(sequences[j * data.batch : (j + 1) * data.batch]).save(path)
            plan.made_group(time.perf_counter() - group_began)
            made += 1
        shards += [Shard.load(path) for path in paths]
        if made:
            left = (time.perf_counter() - began) / made * (len(groups) - g - 1)
            if budget is not None:
                left = min(left, max(0.0, budget.teacher_share * budget.seconds - plan.teacher_seconds))
            tokens = sum(int(s.lengths.sum()) for s in shards)
            done = min(len(prompts), (g + 1) * per_group)
            announce(
                progress,
                f"teacher: {done}/{len(prompts)} prompts continued and recorded, {tokens:,} tokens, "
                f"about {left / 60:.1f} min left",
            )
        taken = g + 1
    if plan.groups is None:
        plan.close_teacher(taken)
    return shards


def _vocabulary(shards: list[Shard], spec: Eagle3Spec, vocab: int, work: Path) -> torch.Tensor:
    path = work / "draft-vocab.pt"
    if path.exists():
        ids: torch.Tensor = torch.load(path, weights_only=True)
        return ids
    ids = draft_vocabulary(shards, spec.draft_vocab_size, vocab)
    torch.save(ids, path)
    return ids


def _budgeted_steps(
    trainer: HeadTrainer, shards: list[Shard], budget: Budget, spent: float, pace: float
) -> int:
    """The steps the budget's rest holds at `pace`: at least one epoch and the steps already
    taken, at most the epochs asked for."""
    most = trainer.total_steps(shards)
    least = max(min(trainer.steps_per_epoch(shards), most), trainer.step)
    return budget.training_steps(spent, pace, least=least, most=most)


def _plan_steps(
    trainer: HeadTrainer, shards: list[Shard], plan: Plan, budget: Budget | None, progress: bool
) -> None:
    """Training's steps, unless the plan has them: what the budget leaves after the teacher at a
    copy's pace, or the epochs asked for."""
    if plan.steps is not None:
        return
    if budget is None:
        plan.fix_steps(trainer.total_steps(shards))
        return
    pace = seconds_per_step(trainer, shards)
    steps = _budgeted_steps(trainer, shards, budget, plan.teacher_seconds, pace)
    plan.fix_steps(steps)
    announce(
        progress,
        f"training: {steps} steps at {pace:.2f} s a step fit the {budget.seconds / 60:g}-minute "
        f"budget's rest (--epochs caps them); re-paced after {repace_after(steps)}",
    )


def _fit(
    trainer: HeadTrainer,
    shards: list[Shard],
    work: Path,
    plan: Plan,
    budget: Budget | None,
    *,
    progress: bool,
) -> None:
    checkpoint = work / "train-state.pt"
    if checkpoint.exists():
        trainer.load_state_dict(torch.load(checkpoint, weights_only=False))
        announce(progress, f"training: resumed at step {trainer.step}")
    assert plan.steps is not None
    total = plan.steps
    done, saved, began = 0, time.perf_counter(), time.perf_counter()
    start_step = trainer.step
    epoch = 0
    while trainer.step < total:
        for batch in trainer.batches(shards, epoch):
            if done < start_step:  # batches an interrupted run already trained on
                done += 1
                continue
            if trainer.step >= total:
                break
            metrics = trainer.train_step(batch, total)
            done += 1
            ran = trainer.step - start_step
            if budget is not None and not plan.repaced and ran >= repace_after(total):
                pace = (time.perf_counter() - began) / ran
                total = _budgeted_steps(trainer, shards, budget, plan.teacher_seconds, pace)
                plan.fix_steps(total, repaced=True)
                announce(progress, f"training: {total} steps at the {pace:.2f} s a step its own kept")
            if time.perf_counter() - saved > trainer.settings.checkpoint_seconds or trainer.step == total:
                torch.save(trainer.state_dict(), checkpoint.with_suffix(".partial"))
                checkpoint.with_suffix(".partial").rename(checkpoint)
                saved = time.perf_counter()
                rate = (trainer.step - start_step) / max(saved - began, 1e-9)
                agree = " ".join(f"{v:.2f}" for k, v in metrics.items() if k.startswith("acc"))
                announce(
                    progress,
                    f"training: step {trainer.step}/{total}, loss {metrics['loss']:.3f}, top-1 agreement by "
                    f"depth {agree}, about {(total - trainer.step) / max(rate, 1e-9) / 60:.1f} min left",
                )
        epoch += 1
