"""OpenAI-compatible completions and chat completions, streamed as server-sent events."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from adaptivespec.engine.request_stream import RequestStream
from adaptivespec.engine.sequence import TokenEvent
from adaptivespec.errors import EngineStoppedError, InvalidRequestError, QueueFullError
from adaptivespec.server import protocol
from adaptivespec.server.protocol import ApiError, GenerationRequest
from adaptivespec.server.state import CONFIG, METRICS, SERVICES, Services

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Outcome:
    text: list[str]
    finish: list[str | None]
    completion_tokens: int = 0


async def completions(request: web.Request) -> web.StreamResponse:
    body = protocol.parse_json(await request.read())
    _check_model(request.app[SERVICES], body)
    return await _serve(request, protocol.parse_completion(body))


async def chat_completions(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    messages, body = protocol.parse_chat(protocol.parse_json(await request.read()))
    _check_model(services, body)
    if not services.chat_template:
        raise ApiError(
            400, "this model's tokenizer has no chat template; use /v1/completions", param="messages"
        )
    try:
        services.engine.intake.check_characters(sum(len(m["content"]) for m in messages), "messages")
    except InvalidRequestError as exc:
        raise ApiError(400, str(exc), param=exc.param) from exc
    prompt = await asyncio.to_thread(render_chat, services.tokenizer, messages)  # off the event loop
    room = services.engine.intake.max_context - len(prompt)
    return await _serve(request, protocol.chat_request(body, prompt, room))


def render_chat(tokenizer: object, messages: list[dict[str, str]]) -> tuple[int, ...]:
    """Token ids of the rendered conversation, tokenized the way the template expects.

    A template that renders the BOS itself (Llama 3, Gemma) must not get a second one from
    the tokenizer, so the ids come from `apply_chat_template`, which adds no special tokens.

    `developer` is OpenAI's newer name for the system turn. A template that never names it
    would write it as an unknown role (SmolLM2's also puts its default system prompt ahead
    of it), so there it is the system turn; a template that names it gets it as sent.
    """
    if "developer" not in str(getattr(tokenizer, "chat_template", None) or ""):
        messages = [m | {"role": "system"} if m["role"] == "developer" else m for m in messages]
    try:
        rendered = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
            messages, tokenize=True, add_generation_prompt=True, return_dict=True
        )
    except Exception as exc:  # a template's own checks (roles, alternation) raise anything
        raise ApiError(400, f"the chat template rejected these messages: {exc}", param="messages") from exc
    return tuple(int(t) for t in rendered["input_ids"])


async def models(request: web.Request) -> web.Response:
    name = request.app[SERVICES].model_name
    return web.json_response(
        {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "adaptivespec"}],
        }
    )


def _check_model(services: Services, body: dict[str, Any]) -> None:
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or model.lower() not in services.model_aliases):
        raise ApiError(
            404,
            f"model {model!r} does not exist; this server serves {services.model_name!r}",
            param="model",
            code="model_not_found",
        )


async def _submit(request: web.Request, job: GenerationRequest) -> list[RequestStream]:
    """Queues every prompt, or none: a refusal part-way aborts the ones already queued.

    Text is tokenized on a worker thread: a long prompt takes milliseconds, which would
    stall every stream the event loop is serving.
    """
    services = request.app[SERVICES]
    metrics = request.app[METRICS]
    engine = services.engine
    streams: list[RequestStream] = []
    try:
        prompts = await asyncio.to_thread(
            lambda: [engine.encode(p) if isinstance(p, str) else p for p in job.prompts]
        )
        for prompt in prompts:
            streams.append(engine.submit(prompt, job.params))
    except (InvalidRequestError, QueueFullError, EngineStoppedError) as exc:
        for stream in streams:
            engine.abort(stream.request_id)
        if isinstance(exc, QueueFullError):
            metrics.rejections.labels("queue_full").inc()
            raise ApiError(429, str(exc), kind="rate_limit_error", code="queue_full") from exc
        if isinstance(exc, EngineStoppedError):
            metrics.rejections.labels("draining").inc()
            reason = engine.failure or "the server is shutting down"
            raise ApiError(503, f"{reason}; retry on another replica", kind="server_error") from exc
        metrics.rejections.labels("invalid").inc()
        raise ApiError(400, str(exc), param=exc.param) from exc
    return streams


async def _merged(
    streams: list[RequestStream], quiet_seconds: float | None = None
) -> AsyncIterator[tuple[int, TokenEvent | None]]:
    """Events of every prompt as they come, tagged with the prompt's index; (-1, None) after
    each `quiet_seconds` without one (a queued request, a long prefill), for keep-alives."""
    queue: asyncio.Queue[tuple[int, TokenEvent]] = asyncio.Queue()

    async def pump(index: int, stream: RequestStream) -> None:
        async for event in stream:
            await queue.put((index, event))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        finished = 0
        while finished < len(streams):
            try:
                index, event = await asyncio.wait_for(queue.get(), quiet_seconds)
            except TimeoutError:
                yield -1, None
                continue
            finished += event.finish_reason is not None
            yield index, event
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _serve(request: web.Request, job: GenerationRequest) -> web.StreamResponse:
    streams = await _submit(request, job)
    try:
        if job.stream:
            return await _stream(request, job, streams)
        return await _collect(request, job, streams)
    finally:
        for stream in streams:
            stream.abort()  # no-op when finished; ends the request otherwise


async def _collect(
    request: web.Request, job: GenerationRequest, streams: list[RequestStream]
) -> web.Response:
    outcome = Outcome([""] * len(streams), [None] * len(streams))
    async for index, event in _merged(streams):
        if event is None:
            continue
        outcome.text[index] += event.text
        outcome.completion_tokens += len(event.token_ids)
        if event.finish_reason is not None:
            outcome.finish[index] = event.finish_reason
            if event.finish_reason == "error":
                raise ApiError(500, event.error or "generation failed", kind="server_error")
    name = request.app[SERVICES].model_name
    choices = [
        protocol.choice(i, t, f, job.chat, False)
        for i, (t, f) in enumerate(zip(outcome.text, outcome.finish, strict=True))
    ]
    body = protocol.envelope(protocol.new_id(job.chat), name, job.chat, False, choices)
    body["usage"] = protocol.usage(sum(s.prompt_tokens for s in streams), outcome.completion_tokens)
    return web.json_response(body)


async def _stream(
    request: web.Request, job: GenerationRequest, streams: list[RequestStream]
) -> web.StreamResponse:
    headers = {
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",  # nginx would otherwise hold the stream back in its buffer
    }
    response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    request_id, name = protocol.new_id(job.chat), request.app[SERVICES].model_name
    completion_tokens = 0
    introduced: set[int] = set()  # choices whose role has been sent
    async for index, event in _merged(streams, request.app[CONFIG].sse_keepalive_seconds):
        if event is None:
            await response.write(b": keep-alive\n\n")  # a comment: clients ignore it, proxies see traffic
            continue
        completion_tokens += len(event.token_ids)
        if event.finish_reason == "error":
            error = protocol.error_body(event.error or "generation failed", "server_error")
            await _event(response, error)
            break
        if event.text or event.finish_reason is not None:
            first = index not in introduced
            introduced.add(index)
            chunk = protocol.choice(index, event.text, event.finish_reason, job.chat, True, first=first)
            await _event(response, protocol.envelope(request_id, name, job.chat, True, [chunk]))
    if job.include_usage:
        final = protocol.envelope(request_id, name, job.chat, True, [])
        final["usage"] = protocol.usage(sum(s.prompt_tokens for s in streams), completion_tokens)
        await _event(response, final)
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _event(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")
