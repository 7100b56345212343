"""The teacher's continuations come from the serving engine: the greedy ones are exactly the
target's own `generate()` text, and a sampled one is the same whatever else is in the batch."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from adaptivespec.train.continuations import Continuations, ContinuationWriter, sampling
from adaptivespec.train.corpus import SHAPES

from ..conftest import TinyPair

PROMPTS = [[5, 17, 42, 9], [3, 3, 8], [100, 7, 21, 60, 2, 14], [11, 12]]
NEW = 12


def test_greedy_continuations_are_the_targets_generate(tiny_pair: TinyPair) -> None:
    writer = ContinuationWriter(Continuations(str(tiny_pair.target), 1, 6, NEW), progress=False)
    written = writer.write(PROMPTS, first_index=0, seed=0)
    model = AutoModelForCausalLM.from_pretrained(tiny_pair.target, dtype=torch.float32)
    eos = model.generation_config.eos_token_id
    for index in (0, 1):  # the first round of shapes is greedy
        prompt = PROMPTS[index]
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW, do_sample=False, pad_token_id=0)
        expected = out[0].tolist()
        if eos is not None and eos in expected[len(prompt) :]:
            expected = expected[: expected.index(eos, len(prompt)) + 1]
        assert written[index] == expected
    assert all(w[: len(p)] == p for w, p in zip(written, PROMPTS, strict=True))


def test_a_sampled_continuation_does_not_depend_on_its_batch(tiny_pair: TinyPair) -> None:
    writer = ContinuationWriter(Continuations(str(tiny_pair.target), 1, 6, NEW), progress=False)
    together = writer.write(PROMPTS, first_index=0, seed=3)
    alone = writer.write(PROMPTS[2:3], first_index=2, seed=3)  # prompt 2 is sampled
    assert alone == together[2:3]


def test_each_prompt_shape_is_continued_both_greedy_and_sampled() -> None:
    """The shapes are interleaved, so each shape's prompts sit SHAPES apart."""
    for shape in range(SHAPES):
        temperatures = [sampling(i, NEW, 0).temperature for i in range(shape, 8 * SHAPES, SHAPES)]
        assert temperatures.count(0.0) == len(temperatures) // 2
