"""Training an EAGLE-3 head on the teacher's shards, as speculators trains one ("training-time test").

Step 0 feeds the head the target's states beside the next token's embedding, and it learns
the target's distribution one token further on. Steps 1..S-1 feed it its own previous
output instead, as drafting does, each position attending to the true prefix and to its own
earlier drafted steps only (speculators' extended mask). The loss is the cross-entropy to the
teacher's distribution over the draft vocabulary, summed over steps. The LM head is the
target's own rows, frozen, as speculators keeps it; the embedding is the target's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from adaptivespec.engine.eagle3_format import Eagle3Spec, default_aux_layers
from adaptivespec.engine.eagle3_head import Eagle3Head, embedding_rows
from adaptivespec.train.command_args import BATCH_SEQUENCES, EPOCHS, LR
from adaptivespec.train.teacher import Shard

LENGTH_WINDOW = 8  # batches whose sequences are sorted by length together


@dataclass(frozen=True, slots=True)
class TrainSettings:
    epochs: float = EPOCHS
    lr: float = LR
    ttt_steps: int = 3  # drafting steps trained together (speculators' default)
    batch_sequences: int = BATCH_SEQUENCES
    seed: int = 0
    checkpoint_seconds: float = 60.0  # how much training an interruption may lose
    bf16: bool = False  # matmuls in bf16 (autocast; the weights stay float32): for CPUs with bf16 arithmetic

    def __post_init__(self) -> None:
        if self.epochs <= 0 or self.lr <= 0 or self.ttt_steps < 1 or self.batch_sequences < 1:
            raise ValueError(f"training settings must be positive: {self}")


def head_spec(target: PreTrainedModel, draft_vocab: int, verifier: str) -> Eagle3Spec:
    """A one-layer llama head as wide as the target, with speculators' default auxiliary layers."""
    text = target.config.get_text_config()
    layers = int(text.num_hidden_layers)
    heads = int(text.num_attention_heads)
    layer_config = {
        "model_type": "llama",
        "hidden_size": int(text.hidden_size),
        "intermediate_size": int(text.intermediate_size),
        "num_attention_heads": heads,
        "num_key_value_heads": int(getattr(text, "num_key_value_heads", None) or heads),
        "head_dim": int(getattr(text, "head_dim", None) or int(text.hidden_size) // heads),
        "num_hidden_layers": 1,
        "vocab_size": embedding_rows(target),
        "rms_norm_eps": float(getattr(text, "rms_norm_eps", 1e-5)),
        "max_position_embeddings": int(getattr(text, "max_position_embeddings", 2048)),
        "rope_theta": float(getattr(text, "rope_theta", None) or 10000.0),
        "attention_bias": False,
        "mlp_bias": False,
    }
    return Eagle3Spec(layer_config, draft_vocab, default_aux_layers(layers), verifier=verifier)


def draft_vocabulary(shards: list[Shard], size: int, vocab: int) -> torch.Tensor:
    """The `size` ids the teacher's text uses most (ties to the lower id), sorted: draft id -> target id."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for shard in shards:
        real = torch.arange(shard.tokens.shape[1]) < shard.lengths[:, None]
        counts += torch.bincount(shard.tokens[real], minlength=vocab)[:vocab]
    order = sorted(range(vocab), key=lambda i: (-int(counts[i]), i))
    return torch.tensor(sorted(order[:size]), dtype=torch.long)


def new_head(spec: Eagle3Spec, target: PreTrainedModel, ids: torch.Tensor, seed: int) -> Eagle3Head:
    torch.manual_seed(seed)
    head = Eagle3Head(spec)
    with torch.no_grad():
        output: Any = target.get_output_embeddings()
        head.lm_head.weight.copy_(output.weight[ids])
        final_norm: Any = getattr(target.get_decoder(), "norm", None)
        if final_norm is not None:
            norm: Any = head.norm
            norm.weight.copy_(final_norm.weight)
        head.d2t.copy_(ids - torch.arange(len(ids)))
        head.t2d.zero_()
        head.t2d[ids] = True
    head.lm_head.weight.requires_grad_(False)
    return head


class _Stacked:
    """A cache that keeps every step's keys and values side by side (training-time test)."""

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if layer in self.keys:
            key = torch.cat([self.keys[layer], key], dim=2)
            value = torch.cat([self.values[layer], value], dim=2)
        self.keys[layer], self.values[layer] = key, value
        return key, value


class HeadTrainer:
    def __init__(self, head: Eagle3Head, embed: nn.Module, settings: TrainSettings) -> None:
        self.head = head
        self.embed = embed
        self.settings = settings
        params = [p for p in head.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)
        self.step = 0

    def batches(self, shards: list[Shard], epoch: int) -> Iterator[Shard]:
        """Every sequence once, shuffled by epoch, in batches of similar length, in random order."""
        rows = [(s, r) for s, shard in enumerate(shards) for r in range(shard.tokens.shape[0])]
        generator = torch.Generator().manual_seed(self.settings.seed + epoch)
        order = [rows[int(i)] for i in torch.randperm(len(rows), generator=generator)]
        size = self.settings.batch_sequences
        # A batch is as wide as its longest sequence: sorting each window of a few batches by
        # length keeps padding (computed, then thrown away) small while the order stays random.
        window = size * LENGTH_WINDOW
        batches = []
        for start in range(0, len(order), window):
            part = sorted(order[start : start + window], key=lambda row: int(shards[row[0]].lengths[row[1]]))
            batches += [part[i : i + size] for i in range(0, len(part), size)]
        for b in torch.randperm(len(batches), generator=generator).tolist():
            picked = batches[b]
            yield _gather([shards[s] for s, _ in picked], [r for _, r in picked])

    def steps_per_epoch(self, shards: list[Shard]) -> int:
        return math.ceil(sum(shard.tokens.shape[0] for shard in shards) / self.settings.batch_sequences)

    def total_steps(self, shards: list[Shard]) -> int:
        return max(1, math.ceil(self.steps_per_epoch(shards) * self.settings.epochs))

    def train_step(self, batch: Shard, total: int) -> dict[str, float]:
        lr = self.settings.lr * 0.5 * (1 + math.cos(math.pi * min(self.step / total, 1.0)))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.settings.bf16):
            loss, accuracy = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.head.parameters(), 1.0)
        self.optimizer.step()
        self.step += 1
        return {"loss": float(loss.detach())} | {f"acc{s}": a for s, a in enumerate(accuracy)}

    def loss(self, batch: Shard) -> tuple[torch.Tensor, list[float]]:
        """Summed over the training-time-test steps; also each step's top-1 agreement."""
        width = batch.tokens.shape[1] - 1  # pairs (token i + 1, state i)
        with torch.no_grad():
            teacher = torch.log_softmax(self.head.lm_head(batch.final[:, 1:].float()), dim=-1)  # [N, W, Vd]
        total, accuracy = torch.zeros(()), []
        for s, logits, live in self._rollout(batch):
            log_probs = torch.log_softmax(logits[:, : width - s], dim=-1)
            target = teacher[:, s:]
            per_token = -(target.exp() * log_probs).sum(-1)
            total = total + (per_token * live).sum() / live.sum().clamp(min=1)
            agree = (log_probs.argmax(-1) == target.argmax(-1)) & live
            accuracy.append(float(agree.sum()) / max(1, int(live.sum())))
        return total, accuracy

    def predictions(self, batch: Shard) -> list[torch.Tensor]:
        """The head's greedy draft (a target id) at each step, as training runs it: step s at
        [n, i] drafts from the true prefix through token i + 1 and the true tokens after it,
        i.e. the token after batch.tokens[n, i + 1 + s]. One [N, W] per step."""
        return [self.head.to_target_ids(logits.argmax(-1)) for _, logits, _ in self._rollout(batch)]

    def _rollout(self, batch: Shard) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """Each step s, its draft logits [N, W, Vd], and where they have a target [N, W - s]."""
        head = self.head
        width = batch.tokens.shape[1] - 1
        valid = torch.arange(1, width + 1) < batch.lengths[:, None]  # [N, W]: token i + 1 is real
        state = head.fuse(batch.aux[:, :-1].float())
        positions = torch.arange(1, width + 1).expand(batch.tokens.shape[0], width)
        cache = _Stacked()
        for s in range(self.settings.ttt_steps):
            ids = torch.nn.functional.pad(batch.tokens[:, 1 + s :], (0, s))  # [N, W]
            with torch.no_grad():
                embeds = self.embed(ids).float()
            state, logits = head(embeds, state, positions + s, _ttt_mask(valid, s), cache)
            yield s, logits, valid[:, s:] & valid[:, : width - s]

    def state_dict(self) -> dict[str, object]:
        return {"head": self.head.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.head.load_state_dict(state["head"])  # type: ignore[arg-type]
        self.optimizer.load_state_dict(state["optimizer"])  # type: ignore[arg-type]
        self.step = int(state["step"])  # type: ignore[call-overload]


def _ttt_mask(valid: torch.Tensor, step: int) -> torch.Tensor:
    """[N, 1, W, (step + 1) W] bool: the true prefix (causal, real keys), then each drafted step's
    own position only."""
    n, width = valid.shape
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    blocks = [causal.unsqueeze(0) & valid[:, None, :]]
    eye = torch.eye(width, dtype=torch.bool).unsqueeze(0).expand(n, width, width)
    blocks += [eye] * step
    return torch.cat(blocks, dim=-1).unsqueeze(1)


def _gather(shards: list[Shard], rows: list[int]) -> Shard:
    width = max(int(shard.lengths[r]) for shard, r in zip(shards, rows, strict=True))
    picked = [(shard, r) for shard, r in zip(shards, rows, strict=True)]

    def stack(part: Callable[[Shard], torch.Tensor]) -> torch.Tensor:
        out = []
        for shard, r in picked:
            row = part(shard)[r, :width]
            pad = width - row.shape[0]
            out.append(torch.nn.functional.pad(row, (0, 0, 0, pad) if row.dim() == 2 else (0, pad)))
        return torch.stack(out)

    lengths = torch.stack([shard.lengths[r] for shard, r in picked])
    return Shard(stack(lambda s: s.tokens), lengths, stack(lambda s: s.aux), stack(lambda s: s.final))
