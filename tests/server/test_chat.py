"""Chat prompts on a real (tiny) model whose template renders the BOS itself, as Llama 3's does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from openai import AsyncOpenAI
from tokenizers.processors import TemplateProcessing
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from adaptivespec.config import EngineConfig, ModelConfig, ServeConfig
from adaptivespec.server.app import create_app
from adaptivespec.server.openai_api import render_chat
from adaptivespec.server.protocol import ApiError

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


async def test_a_streamed_chat_names_its_role_once_so_the_openai_stream_helper_rebuilds_it(
    aiohttp_client: Any, tmp_path: Path, bos_model: Path
) -> None:
    """The `openai` SDK's stream helper joins each delta's fields into the message; a role sent
    in every chunk came out as "assistantassistant..." and failed its validation."""
    client = await _client(aiohttp_client, tmp_path, bos_model)
    messages = [{"role": "user", "content": "hi"}]
    body = {"messages": messages, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    whole = await (await client.post("/v1/chat/completions", json=body)).json()
    raw = await (await client.post("/v1/chat/completions", json=body | {"stream": True})).text()
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert [("role" in d) for d in deltas] == [True] + [False] * (len(deltas) - 1)
    assert "".join(d.get("content", "") for d in deltas) == whole["choices"][0]["message"]["content"]
    sdk = AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="unused", max_retries=0)
    async with sdk.chat.completions.stream(
        model=bos_model.name, messages=messages, max_tokens=6, temperature=0,  # type: ignore[arg-type]
        extra_body={"ignore_eos": True},
    ) as stream:  # fmt: skip
        async for _ in stream:
            pass
        final = stream.current_completion_snapshot  # its `get_final_completion` refuses "length"
    assert final.choices[0].message.role == "assistant"
    assert final.choices[0].message.content == whole["choices"][0]["message"]["content"]
    assert final.choices[0].finish_reason == "length"


async def test_a_developer_turn_is_the_system_turn_where_the_template_has_no_developer_role(
    tiny_pair: TinyPair, bos_model: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(bos_model)
    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    user = {"role": "user", "content": "x"}
    as_system = render_chat(tokenizer, [{"role": "system", "content": "be brief"}, user])
    assert render_chat(tokenizer, [{"role": "developer", "content": "be brief"}, user]) == as_system
    tokenizer.chat_template = TEMPLATE  # names the role: it gets it as sent, and here refuses it
    with pytest.raises(ApiError, match="no developer role"):
        render_chat(tokenizer, [{"role": "developer", "content": "be brief"}, user])
