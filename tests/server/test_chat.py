"""Chat prompts on a real (tiny) model whose template renders the BOS itself, as Llama 3's does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers.processors import TemplateProcessing
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from adaptivespec.config import EngineConfig, ModelConfig, ServeConfig
from adaptivespec.server.app import create_app

from ..conftest import TinyPair

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'developer' %}{{ raise_exception('this template has no developer role') }}{% endif %}"
    "<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
)


@pytest.fixture(scope="module")
def bos_model(tiny_pair: TinyPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tokenizer adds <s> to every encode, and the chat template renders it too."""
    root = tmp_path_factory.mktemp("bos-model")
    tokenizer = AutoTokenizer.from_pretrained(tiny_pair.target)
    tokenizer.add_special_tokens({"bos_token": "<s>"})
    bos = tokenizer.convert_tokens_to_ids("<s>")
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", bos)]
    )
    tokenizer.chat_template = TEMPLATE
    assert tokenizer.encode("hi")[0] == bos  # it really adds one
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, bos_token_id=bos,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


async def _client(aiohttp_client: Any, tmp_path: Path, model: Path) -> Any:
    models = ModelConfig(target=str(model), device="cpu", dtype="float32")
    engine = EngineConfig(models=models, max_batch=2, max_context=128)
    return await aiohttp_client(create_app(ServeConfig(db=f"sqlite:///{tmp_path}/state.db", engine=engine)))


async def test_a_template_that_renders_bos_gets_exactly_one(
    aiohttp_client: Any, tmp_path: Path, bos_model: Path
) -> None:
    client = await _client(aiohttp_client, tmp_path, bos_model)
    messages = [{"role": "user", "content": "hi"}]
    response = await client.post(
        "/v1/chat/completions", json={"messages": messages, "max_tokens": 2, "temperature": 0}
    )
    assert response.status == 200, await response.text()
    tokenizer = AutoTokenizer.from_pretrained(bos_model)
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    one_bos = tokenizer.encode(rendered, add_special_tokens=False)
    assert one_bos.count(tokenizer.bos_token_id) == 1
    assert (await response.json())["usage"]["prompt_tokens"] == len(one_bos)
    models_listed = await (await client.get("/v1/models")).json()
    assert models_listed["data"][0]["id"] == bos_model.name  # the directory's name, not an internal key


async def test_an_unknown_model_name_is_a_404_that_names_the_model(
    aiohttp_client: Any, tmp_path: Path, bos_model: Path
) -> None:
    client = await _client(aiohttp_client, tmp_path, bos_model)
    response = await client.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 2,
            "temperature": 0,
            "model": "nope",
        },
    )
    assert response.status == 404 and (await response.json())["error"]["param"] == "model"


async def test_a_template_that_refuses_the_messages_is_a_400_that_says_why(
    aiohttp_client: Any, tmp_path: Path, bos_model: Path
) -> None:
    client = await _client(aiohttp_client, tmp_path, bos_model)
    messages = [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "x"}]
    response = await client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["param"] == "messages" and "no developer role" in error["message"]


async def test_text_parts_are_the_text_they_hold_and_other_turns_are_400s_that_say_why(
    aiohttp_client: Any, tmp_path: Path, bos_model: Path
) -> None:
    """Clients built on OpenAI's SDKs send content as parts; a text-only model reads the text
    parts and refuses, by name, what it cannot read or run (images, tool calls)."""
    client = await _client(aiohttp_client, tmp_path, bos_model)

    async def chat(*messages: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        body = {"messages": list(messages), "max_tokens": 4, "temperature": 0}
        response = await client.post("/v1/chat/completions", json=body)
        return response.status, await response.json()

    plain = await chat({"role": "user", "content": "hello\nthere"})
    parts = [{"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]
    split = await chat({"role": "user", "content": parts})
    assert plain[0] == split[0] == 200
    assert plain[1]["usage"] == split[1]["usage"]
    assert plain[1]["choices"][0]["message"] == split[1]["choices"][0]["message"]
    image = {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}
    refused = {
        "image": ({"role": "user", "content": [parts[0], image]}, "text only"),
        "tool turn": ({"role": "tool", "tool_call_id": "1", "content": "42"}, "tool"),
        "tool call": (
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            "tool",
        ),
        "role": ({"role": "wizard", "content": "x"}, "'wizard' is not one of"),
        "no content": ({"role": "user", "content": None}, "string or a list of text parts"),
        "empty parts": ({"role": "user", "content": []}, "string or a list of text parts"),
    }  # fmt: skip
    for name, (message, says) in refused.items():
        status, reply = await chat({"role": "user", "content": "x"}, message)
        assert status == 400, name
        assert reply["error"]["param"] == "messages" and says in reply["error"]["message"], name


async def test_a_chat_without_a_token_limit_may_fill_the_context(
    aiohttp_client: Any, tmp_path: Path, bos_model: Path
) -> None:
    """OpenAI's chat completions (and vLLM's) write until the model stops or the context is full
    when no limit is given; 16 tokens is the legacy completions' default, not chat's."""
    client = await _client(aiohttp_client, tmp_path, bos_model)
    messages = [{"role": "user", "content": "hi"}]
    for limit in ({}, {"max_tokens": None}, {"max_completion_tokens": None}):
        body = {"messages": messages, "temperature": 0, "ignore_eos": True} | limit
        response = await client.post("/v1/chat/completions", json=body)
        assert response.status == 200, await response.text()
        reply = await response.json()
        assert reply["choices"][0]["finish_reason"] == "length"
        assert reply["usage"]["total_tokens"] == 128  # the context (max_context) filled, prompt and all
