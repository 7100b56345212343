"""The asyncio decode engine: schedule -> run (on the compute thread) -> postprocess.

Model compute runs on one dedicated thread so the event loop stays responsive; everything
else (scheduling, streaming, telemetry) happens on the loop between steps. Load the models
on that same thread (`compute_thread()`, then pass it in): once two threads have run torch
ops, each keeps its own OpenMP team, and on this 2-core machine a decode step measured 35%
slower (9.8 -> 13.2 ms at batch 8) than with every op on one thread.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from collections.abc import Sequence as Seq
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from adaptivespec.config import EngineConfig
from adaptivespec.controller.acceptance import survival_counts
from adaptivespec.controller.policy import SpecPolicy
from adaptivespec.engine.runner import DecodeOutput, PrefillItem, Runner
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.scheduler import RowMoves, Scheduler
from adaptivespec.engine.sequence import Sequence, SequenceStats, TokenEvent
from adaptivespec.engine.telemetry import StepTelemetry, TelemetryBus
from adaptivespec.engine.tokenizer import Tokenizer, longest_token_chars
from adaptivespec.errors import EngineStoppedError, InvalidRequestError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Completion:
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    stats: SequenceStats


@dataclass(slots=True)
class EngineTotals:
    """Running totals for metrics, counted where they happen (telemetry may drop records)."""

    prompt_tokens: int = 0  # of admitted requests, when they are admitted
    generation_tokens: int = 0  # tokens requests kept: none past a stop condition


def compute_thread() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="adaptivespec-compute")


class RequestStream:
    """One request's token events; also tells how many tokens its prompt had."""

    def __init__(self, prompt_tokens: int, events: AsyncIterator[TokenEvent]) -> None:
        self.prompt_tokens = prompt_tokens
        self._events = events

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        return self._events

    async def __anext__(self) -> TokenEvent:
        return await anext(self._events)

    async def aclose(self) -> None:
        await self._events.aclose()  # type: ignore[attr-defined]


class Engine:
    def __init__(
        self,
        runner: Runner,
        tokenizer: Tokenizer,
        policy: SpecPolicy,
        config: EngineConfig,
        *,
        telemetry: TelemetryBus | None = None,
        compute: ThreadPoolExecutor | None = None,
    ) -> None:
        self.runner = runner
        self.tokenizer = tokenizer
        self.policy = policy  # swapped by reference; read once per step
        self.config = config
        self.telemetry = telemetry or TelemetryBus(config.telemetry_queue)
        self.scheduler = Scheduler(config.max_batch, config.max_queued, config.max_prefill_tokens)
        self._seeds = random.Random(config.seed)
        self._wakeup = asyncio.Event()
        self._owns_executor = compute is None
        self._executor: ThreadPoolExecutor | None = compute
        self._task: asyncio.Task[None] | None = None
        self.steps = 0
        self.totals = EngineTotals()
        self.failure: str | None = None  # why the step loop died; the service must be restarted
        self.max_prompt_chars = config.max_context * longest_token_chars(tokenizer)

    # ---- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        if self._executor is None:
            self._executor = compute_thread()
        self._task = asyncio.create_task(self._loop(), name="adaptivespec-engine")
        log.info(self.runner.describe())

    async def stop(self, reason: str = "abort") -> None:
        """Ends every request with `reason`, stops the loop, and joins the compute thread."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.scheduler.drain_waiting(reason)
        for sequence in self.scheduler.running:
            sequence.fail(reason)
        self.scheduler.running.clear()
        if self._executor is not None and self._owns_executor:
            self._executor.shutdown(wait=True)
            self._executor = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def healthy(self) -> bool:
        """Started and its loop alive: what /health and the systemd watchdog report."""
        return self.running and self.failure is None

    # ---- requests --------------------------------------------------------------------
    def submit(self, prompt: str | Seq[int], params: SamplingParams) -> RequestStream:
        """Validates and queues a request; iterate the result for its tokens.

        Raises at once on bad input or a full queue. Closing or cancelling the iterator
        aborts the request, and its row is freed at the next step.
        """
        sequence = self._enqueue(prompt, params)
        return RequestStream(len(sequence.prompt_ids), self._stream(sequence))

    async def generate(self, prompt: str | Seq[int], params: SamplingParams) -> Completion:
        """Runs one request to the end and returns everything it produced."""
        sequence = self._enqueue(prompt, params)
        events = [event async for event in self._stream(sequence)]
        last = events[-1]
        if last.finish_reason == "error":
            raise RuntimeError(f"generation failed: {last.error}")
        text = "".join(e.text for e in events)
        return Completion(
            sequence.prompt_ids, sequence.output_ids, text, str(last.finish_reason), sequence.stats
        )

    def _enqueue(self, prompt: str | Seq[int], params: SamplingParams) -> Sequence:
        if not self.running:
            raise EngineStoppedError(self.failure or "the engine is not running; call start() first")
        sequence = self._new_sequence(self._tokenize(prompt), params)
        self.scheduler.add(sequence)
        self._wakeup.set()
        return sequence

    def encode(self, prompt: str) -> list[int]:
        """Token ids of a text prompt. Thread-safe: servers call it off the event loop, since a
        long prompt takes milliseconds to tokenize; text that cannot fit the context is refused
        by its length before any tokenizing."""
        if not prompt:
            raise InvalidRequestError("prompt is empty; send at least one character", "prompt")
        if len(prompt) > self.max_prompt_chars:
            raise InvalidRequestError(
                f"prompt has {len(prompt)} characters, more than a context of {self.config.max_context} "
                "tokens can hold; shorten the prompt",
                "prompt",
            )
        return list(self.tokenizer.encode(prompt, add_special_tokens=True))

    def _tokenize(self, prompt: str | Seq[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.encode(prompt)
        ids = [int(t) for t in prompt]
        if not ids:
            raise InvalidRequestError("prompt is empty; send at least one token", "prompt")
        vocab = self.runner.vocab_rows
        if any(t < 0 or t >= vocab for t in ids):
            raise InvalidRequestError(f"prompt token ids must be in [0, {vocab})", "prompt")
        return ids

    def _new_sequence(self, prompt_ids: list[int], params: SamplingParams) -> Sequence:
        limit = self.config.max_context
        if len(prompt_ids) >= limit:
            raise InvalidRequestError(
                f"prompt has {len(prompt_ids)} tokens but the context holds {limit}; shorten the prompt",
                "prompt",
            )
        if len(prompt_ids) + params.max_tokens > limit:
            raise InvalidRequestError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the "
                f"context of {limit} tokens; lower max_tokens to at most {limit - len(prompt_ids)}",
                "max_tokens",
            )
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        return Sequence(prompt_ids, params, seed, limit, self.tokenizer)

    async def _stream(self, sequence: Sequence) -> AsyncIterator[TokenEvent]:
        try:
            while True:
                event = await sequence.events.get()
                yield event
                if event.finish_reason is not None:
                    return
        finally:
            if not sequence.finished:
                sequence.abort()
                self._wakeup.set()

    # ---- the step loop -----------------------------------------------------------------
    async def _loop(self) -> None:
        """Steps while there is work. A step that raises outside the contained model compute
        (moving rows, detokenizing, stop matching) leaves the batch in an unknown state: every
        request then fails with the reason, and the loop stops, so /health and the watchdog
        report it and the service manager restarts the process."""
        try:
            while True:
                if not self.scheduler.has_work:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                await self.step()
        except Exception as exc:
            log.exception("the engine loop failed; failing every request")
            self.failure = (
                f"the engine stopped after an internal error ({type(exc).__name__}); restart the service"
            )
            self._fail_everything(self.failure)

    def _fail_everything(self, error: str) -> None:
        for sequence in self.scheduler.running:
            sequence.fail("error", error)
        self.scheduler.running.clear()
        while self.scheduler.waiting:
            self.scheduler.waiting.popleft().fail("error", error)

    async def step(self) -> None:
        """One iteration: admit and prefill newcomers, then one decode step of the batch."""
        moves = self.scheduler.compact()
        admission = self.scheduler.admit()
        if admission.sequences:
            await self._prefill(moves, admission.row_start, admission.sequences)
            moves = self.scheduler.compact()
        elif moves.srcs:
            await self._compute(self.runner.move_rows, moves.srcs, moves.dsts)
            moves = self.scheduler.compact()
        batch = list(self.scheduler.running)
        if batch:
            await self._decode(moves, batch)
        else:
            await asyncio.sleep(0)

    async def _prefill(self, moves: RowMoves, row_start: int, sequences: list[Sequence]) -> None:
        items = [PrefillItem(s.prompt_ids, s.params, s.seed) for s in sequences]

        def work() -> list[int]:
            self.runner.move_rows(moves.srcs, moves.dsts)
            return self.runner.prefill(row_start, items).first_tokens

        try:
            first_tokens = await self._compute(work)
        except Exception as exc:  # contained: only these requests fail
            log.exception("prefill failed")
            for sequence in sequences:
                sequence.fail("error", f"prefill failed: {type(exc).__name__}")
            return
        for sequence, token in zip(sequences, first_tokens, strict=True):
            self.totals.prompt_tokens += len(sequence.prompt_ids)
            self.totals.generation_tokens += sequence.add_tokens([token], self.runner.eos_token_ids)

    async def _decode(self, moves: RowMoves, batch: list[Sequence]) -> None:
        context = sum(len(s) for s in batch) / len(batch)
        k = self.policy.k_for(len(batch), int(context))

        def work() -> DecodeOutput:
            self.runner.move_rows(moves.srcs, moves.dsts)
            return self.runner.decode(len(batch), k)

        try:
            out = await self._compute(work)
        except Exception as exc:
            log.exception("decode step failed")
            for sequence in batch:
                sequence.fail("error", f"decode step failed: {type(exc).__name__}")
            return
        self.steps += 1
        kept = 0
        for sequence, tokens, drafted, accepted in zip(
            batch, out.tokens, out.drafted, out.accepted, strict=True
        ):
            sequence.stats.steps += 1
            sequence.stats.drafted += drafted
            sequence.stats.accepted += accepted
            if not sequence.finished:
                kept += sequence.add_tokens(tokens, self.runner.eos_token_ids)
        self.totals.generation_tokens += kept
        self.telemetry.publish(self._record(out, len(batch), context, kept))

    def _record(self, out: DecodeOutput, batch_size: int, context: float, emitted: int) -> StepTelemetry:
        return StepTelemetry(
            model_key=self.runner.model_key,
            hardware_key=self.runner.hardware_key,
            batch_size=batch_size,
            k=out.k,
            mean_context_len=context,
            drafted=sum(out.drafted),
            accepted=sum(out.accepted),
            emitted=emitted,  # tokens the requests kept; none past a stop condition
            draft_seconds=out.draft_seconds,
            verify_seconds=out.verify_seconds,
            step_seconds=out.step_seconds,
            timestamp=time.time(),
            width=out.width,
            kept_at_least=survival_counts(out.accepted, out.width),
        )

    async def _compute(self, fn: Callable[..., T], *args: object) -> T:
        if self._executor is None:
            raise EngineStoppedError("the engine is not running")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
