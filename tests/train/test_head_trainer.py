"""The head trainer learns the teacher's batch in float32 and with bf16 matmuls alike; the
weights it trains stay float32 either way (the head is served in float32)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from adaptivespec.engine.eagle3_head import embedding_rows
from adaptivespec.train.head_trainer import HeadTrainer, TrainSettings, draft_vocabulary, head_spec, new_head
from adaptivespec.train.teacher import Teacher

from ..conftest import TinyPair

SEQUENCES = [
    [5, 17, 42, 9, 5, 17, 42, 9, 5, 17],
    [3, 3, 8, 100, 7, 21, 3, 3, 8, 100],
    [11, 12, 13, 14, 11, 12],
]


@pytest.mark.parametrize("bf16", [False, True])
def test_training_lowers_the_loss_on_a_fixed_batch(tiny_pair: TinyPair, bf16: bool) -> None:
    target = AutoModelForCausalLM.from_pretrained(tiny_pair.target, dtype=torch.float32)
    spec = head_spec(target, 64, str(tiny_pair.target))
    with torch.inference_mode():
        shard = Teacher(target, spec.aux_layers or (), bf16=bf16).record(SEQUENCES)
    head = new_head(spec, target, draft_vocabulary([shard], 64, embedding_rows(target)), seed=0)
    trainer = HeadTrainer(head, target.get_input_embeddings(), TrainSettings(lr=3e-3, bf16=bf16))
    losses = [trainer.train_step(shard, total=40)["loss"] for _ in range(40)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) < 0.85 * sum(losses[:5])  # the floor is the teacher's entropy, not 0
    assert all(p.dtype == torch.float32 for p in head.parameters())
