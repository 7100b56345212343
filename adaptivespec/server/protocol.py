"""OpenAI request parsing and response shapes. Bad input raises ApiError, which becomes an
OpenAI error body: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.errors import InvalidRequestError


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.param, self.code)


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# Fields this server does not honour, with the values that ask for nothing (OpenAI's, and
# vLLM's extensions that clients written for vLLM send). Any other value would change what is
# generated or returned, so it is refused rather than dropped: a client that asked for a
# penalty, a JSON reply or a top-k cut must not get text made without it.
_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "tools": (None, []),
    "functions": (None, []),
    "tool_choice": (None, "none", "auto"),
    "function_call": (None, "none", "auto"),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "repetition_penalty": (None, 1),
    "top_k": (None, 0, -1),
    "min_p": (None, 0),
    "min_tokens": (None, 0),
    "stop_token_ids": (None, []),
    "response_format": (None, {"type": "text"}),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "structured_outputs": (None,),
    "prompt_logprobs": (None, 0),
    "audio": (None,),
    "modalities": (None, ["text"]),
}
# Message roles a chat template is given; a tool's turn and an assistant's tool calls need
# tools, which this server does not run.
_ROLES = ("system", "developer", "user", "assistant")


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    prompts: tuple[str | tuple[int, ...], ...]
    params: SamplingParams
    stream: bool
    include_usage: bool
    chat: bool


MAX_PROMPTS = 32  # prompts one completion request may carry; each becomes a queued request


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except RecursionError as exc:
        raise ApiError(400, "request body nests too deeply; flatten the JSON") from exc
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, or an integer too long to read
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def parse_completion(body: dict[str, Any]) -> GenerationRequest:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: tuple[str | tuple[int, ...], ...] = (prompt,)
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = tuple(prompt)
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        prompts = (tuple(prompt),)
    else:
        raise ApiError(
            400,
            "prompt must be a non-empty string, a list of strings, or a list of token ids",
            param="prompt",
        )
    if len(prompts) > MAX_PROMPTS:
        raise ApiError(
            400, f"at most {MAX_PROMPTS} prompts per request; send the rest in more requests", param="prompt"
        )
    return _generation(body, prompts, chat=False)


def parse_chat(body: dict[str, Any]) -> tuple[list[dict[str, str]], dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    return [_message(m) for m in messages], body


def _message(message: Any) -> dict[str, str]:
    """One message as the template takes it: a role and its text (text parts joined by lines)."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ApiError(400, "each message needs a string role and a string content", param="messages")
    role = message["role"]
    if role in ("tool", "function") or message.get("tool_calls") or message.get("function_call"):
        raise ApiError(
            400, "tool calls and tool results are not supported by this server: send text turns only",
            param="messages",
        )  # fmt: skip
    if role not in _ROLES:
        raise ApiError(400, f"message role {role!r} is not one of {', '.join(_ROLES)}", param="messages")
    content = message.get("content")
    if isinstance(content, list) and content:
        kinds = {part.get("type") if isinstance(part, dict) else None for part in content}
        if kinds != {"text"} or not all(isinstance(part.get("text"), str) for part in content):
            raise ApiError(
                400,
                f'content parts must be text ({{"type": "text", "text": ...}}); this model reads '
                f"text only, got {sorted(str(kind) for kind in kinds)}",
                param="messages",
            )
        content = "\n".join(part["text"] for part in content)
    if not isinstance(content, str):
        raise ApiError(
            400, "each message's content must be a string or a list of text parts", param="messages"
        )
    return {"role": role, "content": content}


def chat_request(body: dict[str, Any], prompt: tuple[int, ...], room: int) -> GenerationRequest:
    """A chat request; without a token limit it may write as much as the context has `room` for,
    as OpenAI's chat completions and vLLM do (16 is the legacy completions' default only)."""
    return _generation(body, (prompt,), chat=True, default_tokens=max(room, 1))


def _generation(
    body: dict[str, Any], prompts: tuple[str | tuple[int, ...], ...], chat: bool, default_tokens: int = 16
) -> GenerationRequest:
    n = _given(body, "n", 1)
    if n != 1:
        raise ApiError(400, "only n=1 is supported; send one request per completion", param="n")
    for name, allowed in _UNSUPPORTED.items():
        if body.get(name) not in allowed:
            raise ApiError(400, f"{name} is not supported by this server; leave it out", param=name)
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, list) else ()
    if stop is not None and not isinstance(stop, (str, list)):
        raise ApiError(400, "stop must be a string or a list of strings", param="stop")
    options = _given(body, "stream_options", {})
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    max_tokens = _given(body, "max_completion_tokens", _given(body, "max_tokens", default_tokens))
    try:
        params = SamplingParams(
            max_tokens=_typed(max_tokens, int, "max_tokens"),
            temperature=_real(_given(body, "temperature", 1.0), "temperature"),
            top_p=_real(_given(body, "top_p", 1.0), "top_p"),
            seed=None if body.get("seed") is None else _typed(body.get("seed"), int, "seed"),
            stop=stops,
            ignore_eos=_flag(body, "ignore_eos"),  # vLLM's extension, for benchmarks
        )
    except InvalidRequestError as exc:
        raise ApiError(400, str(exc), param=exc.param) from exc
    stream = _given(body, "stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false", param="stream")
    return GenerationRequest(prompts, params, stream, bool(options.get("include_usage", False)), chat)


def _given(body: dict[str, Any], name: str, default: Any) -> Any:
    """The field's value; its default where it is left out or null (OpenAI's clients send both)."""
    value = body.get(name)
    return default if value is None else value


def _flag(body: dict[str, Any], name: str) -> bool:
    value = _given(body, name, False)
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false", param=name)
    return value


def _real(value: Any, name: str) -> float:
    try:
        return float(_typed(value, (int, float), name))
    except OverflowError as exc:  # an integer beyond float's range, such as 10**400
        raise ApiError(400, f"{name} is out of range", param=name) from exc


def _typed(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ApiError(400, f"{name} must be a number, got {json.dumps(value)}", param=name)
    return value


def new_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"


def choice(
    index: int, text: str, finish: str | None, chat: bool, streaming: bool, *, first: bool = True
) -> dict[str, Any]:
    """One choice of a reply or of a streamed chunk.

    A streamed chat choice names its role in its first delta only, as OpenAI's do: clients
    that rebuild the message by joining deltas (the `openai` SDK's stream helpers among them)
    join every field, so a role repeated in each chunk would read "assistantassistant...".
    """
    if not chat:
        return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
    if not streaming:
        message = {"role": "assistant", "content": text}
        return {"index": index, "message": message, "logprobs": None, "finish_reason": finish}
    delta = {"role": "assistant"} if first else {}
    if text or first:
        delta["content"] = text
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}


def envelope(
    request_id: str, model: str, chat: bool, streaming: bool, choices: list[dict[str, Any]]
) -> dict[str, Any]:
    kind = ("chat.completion.chunk" if streaming else "chat.completion") if chat else "text_completion"
    return {"id": request_id, "object": kind, "created": int(time.time()), "model": model, "choices": choices}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
