"""Tokenizer and text edge cases: leading spaces, stop strings mid-step, silent tokens, EOS lists, ids."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.detokenizer import Detokenizer
from adaptivespec.engine.engine import Engine
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.records import Completion
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.sequence import Sequence
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.engine.tokenizer import ByteTokenizer
from adaptivespec.errors import InvalidRequestError

from ..conftest import TEST_DEVICE, TinyPair, engine_config


def _metaspace_tokenizer() -> PreTrainedTokenizerFast:
    """SentencePiece-style pieces: a decode that starts at a piece drops its leading space."""
    vocab = {"<unk>": 0, "</s>": 1, "▁Hello": 2, "▁world": 3, "▁again": 4}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    backend.decoder = decoders.Metaspace(prepend_scheme="always")
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>")


def test_sentencepiece_keeps_the_first_generated_tokens_leading_space() -> None:
    tokenizer = _metaspace_tokenizer()
    assert tokenizer.decode([3]) == "world"  # what a decode of the new token alone gives
    sequence = Sequence([2], SamplingParams(max_tokens=8), 0, 64, tokenizer)
    sequence.add_tokens([3], frozenset())
    sequence.add_tokens([4], frozenset())
    texts = [sequence.events.get_nowait().text for _ in range(2)]
    assert texts == [" world", " again"]


class _CountingTokenizer(ByteTokenizer):
    """Bytes, plus id 256 as a special token that decodes to nothing when skipped."""

    def __init__(self) -> None:
        self.longest_decode = 0

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        self.longest_decode = max(self.longest_decode, len(token_ids))
        return super().decode([t for t in token_ids if t < 256])


def test_detokenization_stays_linear_when_tokens_decode_to_nothing() -> None:
    tokenizer = _CountingTokenizer()
    sequence = Sequence([65], SamplingParams(max_tokens=5000, ignore_eos=True), 0, 8192, tokenizer)
    for _ in range(3000):
        sequence.add_tokens([256], frozenset({256}))
    sequence.add_tokens([66], frozenset())
    assert tokenizer.longest_decode <= 8  # a window of a few tokens, not the whole output
    assert sequence.events.get_nowait().token_ids == (256,)


def test_detokenizer_holds_a_partial_character_until_it_completes() -> None:
    detokenizer = Detokenizer(ByteTokenizer(), [104])
    euro = list("€".encode())
    assert detokenizer.extend(euro[:2]) == ""
    assert detokenizer.extend(euro[2:]) == "€"


@pytest.mark.parametrize("clean_up", [False, True])
def test_streamed_text_equals_one_decode_of_the_whole_output(tiny_pair: TinyPair, clean_up: bool) -> None:
    """Without space clean-up the window decodes in the tokenizer's backend; with it, through
    transformers' decode. Either way, the streamed pieces join to what one decode gives."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_pair.target, clean_up_tokenization_spaces=clean_up)
    text = "print(x) , y . \u00e9t\u00e9 \u20ac5 ! def f(a , b):\n    return a+b ?"
    ids = tokenizer.encode(text, add_special_tokens=False)
    detokenizer = Detokenizer(tokenizer, ids[:3])
    for i in range(3, len(ids), 2):
        detokenizer.extend(ids[i : i + 2], flush=i + 2 >= len(ids))
    assert detokenizer.text == tokenizer.decode(ids[3:], skip_special_tokens=True)


def test_tokens_after_a_stop_string_are_neither_returned_nor_counted() -> None:
    tokenizer = ByteTokenizer()
    sequence = Sequence([1], SamplingParams(max_tokens=50, stop=("STOP",)), 0, 64, tokenizer)
    kept = sequence.add_tokens(list(b"abSTOPcd"), frozenset())  # one step: accepted drafts + bonus
    event = sequence.events.get_nowait()
    assert kept == 6 and event.token_ids == tuple(b"abSTOP")
    assert event.text == "ab" and event.finish_reason == "stop"
    assert sequence.output_ids == list(b"abSTOP")


async def test_stop_mid_step_on_a_real_engine_keeps_only_the_tokens_up_to_it(
    tiny_models: LoadedModels, tiny_pair: TinyPair
) -> None:
    config = engine_config(tiny_pair)
    prompt = "for i in range(10):\n"
    plain = await _generate(tiny_models, config, prompt, SamplingParams(max_tokens=40, temperature=0.0))
    text = tiny_models.tokenizer.decode(plain.token_ids)
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    needed = next(n for n in range(1, 41) if stop in tiny_models.tokenizer.decode(plain.token_ids[:n]))
    records: list[StepTelemetry] = []
    params = SamplingParams(max_tokens=40, temperature=0.0, stop=(stop,))
    stopped = await _generate(tiny_models, config, prompt, params, k=8, records=records)
    assert stopped.finish_reason == "stop" and stopped.token_ids == plain.token_ids[:needed]
    assert sum(r.emitted for r in records) == needed - 1  # the prefill's first token is not a step's


async def _generate(
    loaded: LoadedModels,
    config: EngineConfig,
    prompt: str,
    params: SamplingParams,
    *,
    k: int = 0,
    records: list[StepTelemetry] | None = None,
) -> Completion:
    engine = Engine(loaded.runner, loaded.tokenizer, FixedK(k), config)
    subscription = engine.telemetry.subscribe()
    await engine.start()
    try:
        completion = await engine.generate(prompt, params)
        await asyncio.sleep(0)
        while records is not None and not subscription.queue.empty():
            records.append(subscription.queue.get_nowait())
        return completion
    finally:
        await engine.stop()


def _tiny_model_dir(root: Path, tokenizer_from: Path, rows: int, generation: dict[str, object]) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    config = LlamaConfig(
        vocab_size=rows, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(root)
    tokenizer.save_pretrained(root)
    (root / "generation_config.json").write_text(json.dumps(generation))
    return root


def _load(path: Path) -> LoadedModels:
    models = ModelConfig(
        target=str(path), proposer="ngram", device=TEST_DEVICE, dtype="float32", runtime="torch"
    )
    return load_runner(EngineConfig(models=models, max_batch=2, max_context=128), progress=False)


def test_eos_ids_come_from_generation_config_lists_too(tiny_pair: TinyPair, tmp_path: Path) -> None:
    size = len(AutoTokenizer.from_pretrained(tiny_pair.target))
    path = _tiny_model_dir(tmp_path, tiny_pair.target, size, {"eos_token_id": [5, 7]})
    assert {5, 7} <= _load(path).runner.eos_token_ids


@pytest.mark.parametrize("extra_rows", [16, -8])
async def test_prompt_ids_are_checked_against_the_embedding_rows(
    tiny_pair: TinyPair, tmp_path: Path, extra_rows: int
) -> None:
    """Padded tables accept ids past the tokenizer; small tables refuse ids past their rows."""
    size = len(AutoTokenizer.from_pretrained(tiny_pair.target))
    rows = size + extra_rows
    loaded = _load(_tiny_model_dir(tmp_path, tiny_pair.target, rows, {}))
    config = EngineConfig(
        models=ModelConfig(target="unused", device=TEST_DEVICE), max_batch=2, max_context=128
    )
    engine = Engine(loaded.runner, loaded.tokenizer, FixedK(0), config)
    await engine.start()
    try:
        done = await engine.generate([1, rows - 1], SamplingParams(max_tokens=2))
        assert len(done.token_ids) == 2
        with pytest.raises(InvalidRequestError, match=f"in \\[0, {rows}\\)"):
            engine.submit([1, rows], SamplingParams(max_tokens=2))
    finally:
        await engine.stop()
