"""The asyncio decode engine: schedule -> run (on the compute thread) -> postprocess.

Model compute runs on one dedicated thread so the event loop stays responsive; everything
else (scheduling, streaming, telemetry) happens on the loop between steps, or, when nothing
can change the batch, while the next step already runs (`overlap`). Load the models
on that same thread (`compute_thread()`, then pass it in): once two threads have run torch
ops, each keeps its own OpenMP team, and on a small CPU a decode step then runs markedly
slower than with every op on one thread (docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from collections.abc import Sequence as Seq
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from adaptivespec.config import EngineConfig
from adaptivespec.engine.delivery import Delivery
from adaptivespec.engine.intake import Intake
from adaptivespec.engine.live_requests import LiveRequests
from adaptivespec.engine.prefill_pacer import PrefillPacer
from adaptivespec.engine.records import Completion, EngineTotals
from adaptivespec.engine.request_stream import RequestStream
from adaptivespec.engine.runner import DecodeOutput, PrefillItem, Runner
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.scheduler import PromptChunk, RowMoves, Scheduler
from adaptivespec.engine.sequence import Sequence
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.telemetry import TelemetryBus
from adaptivespec.engine.tokenizer import Tokenizer
from adaptivespec.errors import EngineStoppedError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DecodeInFlight:
    """A submitted decode step, with the batch as it was when the step was submitted."""

    batch: list[Sequence]
    context: float  # mean tokens per row before the step
    result: asyncio.Future[DecodeOutput]


def compute_thread() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="adaptivespec-compute")


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
        # The runner's rows: max_batch, or fewer when the KV cache's memory budget buys fewer.
        rows = min(config.max_batch, runner.max_batch)
        self.scheduler = Scheduler(rows, config.max_queued, config.max_prefill_tokens)
        self.pacer = PrefillPacer(config.max_prefill_tokens, config.prefill_chunk_tokens)
        self.intake = Intake(tokenizer, config.max_context, runner.vocab_rows, config.seed)
        self._wakeup = asyncio.Event()
        self._owns_executor = compute is None
        self._executor: ThreadPoolExecutor | None = compute
        self._task: asyncio.Task[None] | None = None
        self._ahead: DecodeInFlight | None = None  # the next step, submitted before this one's streaming
        self.delivery = Delivery(runner, self.telemetry, self.pacer)
        self.failure: str | None = None  # why the step loop died; the service must be restarted
        self.requests = LiveRequests(on_abort=self._wakeup.set)
        self._progress_at = time.monotonic()  # the last step's end, or when work last arrived

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
        if self._ahead is not None:
            self._ahead.result.cancel()  # the thread finishes the step; nobody reads it
            self._ahead = None
        self._end_all(reason)
        if self._executor is not None and self._owns_executor:
            self._executor.shutdown(wait=True)
            self._executor = None

    @property
    def steps(self) -> int:
        """Decode steps run so far."""
        return self.delivery.steps

    @property
    def totals(self) -> EngineTotals:
        return self.delivery.totals

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def stalled_for(self) -> float:
        """Seconds that pending work has waited for a step to complete (0 with no work)."""
        return time.monotonic() - self._progress_at if self.scheduler.has_work else 0.0

    @property
    def healthy(self) -> bool:
        """Started, its loop alive, and not stalled (a step that never returns, with work
        waiting): what /health and the systemd watchdog report."""
        stalled = self.stalled_for > self.config.stall_seconds
        return self.running and self.failure is None and not stalled

    # ---- requests --------------------------------------------------------------------
    def submit(self, prompt: str | Seq[int], params: SamplingParams) -> RequestStream:
        """Validates and queues a request; iterate the result for its tokens.

        Raises at once on bad input or a full queue. `abort(request_id)`, or the stream's own
        `abort()`, ends the request; its row is freed at the next step.
        """
        return self._open(prompt, params)[1]

    def _open(self, prompt: str | Seq[int], params: SamplingParams) -> tuple[Sequence, RequestStream]:
        sequence = self._enqueue(prompt, params)
        return sequence, self.requests.open(sequence)

    def abort(self, request_id: str) -> None:
        """Ends a request that has not finished; an unknown or finished id is a no-op."""
        self.requests.abort(request_id)

    async def generate(self, prompt: str | Seq[int], params: SamplingParams) -> Completion:
        """Runs one request to the end and returns everything it produced."""
        sequence, stream = self._open(prompt, params)
        try:
            events = [event async for event in stream]
        finally:
            stream.abort()
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
        sequence = self.intake.sequence(prompt, params)
        if not self.scheduler.has_work:
            self._progress_at = time.monotonic()  # the wait for a step starts now, not when it idled
        self.scheduler.add(sequence)
        self._wakeup.set()
        return sequence

    def encode(self, prompt: str) -> list[int]:
        """Token ids of a text prompt (thread-safe: servers call it off the event loop)."""
        return self.intake.encode(prompt)

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
                self._progress_at = time.monotonic()
        except Exception as exc:
            log.exception("the engine loop failed; failing every request")
            self.failure = (
                f"the engine stopped after an internal error ({type(exc).__name__}); restart the service"
            )
            self._end_all("error", self.failure)

    def _end_all(self, reason: str, error: str | None = None) -> None:
        """Ends every running and waiting request with `reason`."""
        self.scheduler.end_all(reason, error)

    async def step(self) -> None:
        """One iteration: newcomers are admitted and prefilled, then the batch decodes one step.

        Each phase schedules on the event loop, runs on the compute thread, and postprocesses
        on the loop. A failed prefill or decode fails only its requests; anything else that
        raises stops the loop (see `_loop`). A step submitted ahead already holds the batch,
        so nothing is admitted before it.
        """
        if self._ahead is None and await self._admit():
            return  # the prompts went in with this step's decode
        if self._ahead is not None or self.scheduler.running:
            await self._decode()
        else:
            await asyncio.sleep(0)

    async def _admit(self) -> bool:
        """Prefills newcomers, or the next chunk of a long prompt, within the pacer's budget.

        While rows decode at K = 0 and the runner can, the chunks go into the decode step's
        own forward (segments.py), and this returns True: the step is done. It is done too when
        prompts went in apart and others still wait for a step that can take them with the
        decode.
        """
        moves = self.scheduler.compact()  # rows of finished requests are freed first
        if not self.scheduler.prompts_waiting:  # aborted ones count: admit fails them
            await self._move(moves)
            return False
        batch = list(self.scheduler.running)
        context = sum(len(s) for s in batch) / len(batch) if batch else 0.0
        fused = self._fuses(batch)
        admission = self.scheduler.admit(
            self.pacer.budget(len(batch), self.scheduler.queued_tokens(), fused=fused)
        )
        await self._move(moves)
        await self._move(admission.moves)  # after compaction's: they start from where it left rows
        if not admission.chunks:
            return False
        items = [
            PrefillItem(c.sequence.prompt_ids, c.sequence.params, c.sequence.seed, c.start, c.end)
            for c in admission.chunks
        ]
        if fused:
            await self._decode_with(batch, context, admission.row_start, admission.chunks, items)
            return True
        await self._prefill(admission.row_start, admission.chunks, items)
        # Prompts the pacer left waiting go into the next step's forward, beside the new rows'
        # first decode, rather than behind a plain step of their own; but a pacer that has not
        # yet measured a plain step would not know how much such a step can take.
        waiting = bool(self.scheduler.prompts_waiting) and self.pacer.knows_steps
        return waiting and self._fuses(self.scheduler.running)

    async def _prefill(self, row_start: int, chunks: list[PromptChunk], items: list[PrefillItem]) -> None:
        """Prefills the chunks together; if that fails, each alone, so that only a request whose
        own prefill fails is failed (contained: the rows of others are not touched)."""
        try:
            out = await self._compute(self.runner.prefill, row_start, items)
        except Exception as exc:
            log.exception("prefill of %d prompt chunk(s) failed", len(items))
            if len(items) == 1:
                chunks[0].sequence.fail("error", f"prefill failed: {type(exc).__name__}: {exc}")
                return
            for i, (chunk, item) in enumerate(zip(chunks, items, strict=True)):
                await self._prefill(row_start + i, [chunk], [item])
            return
        self.pacer.prefilled(sum(c.end - c.start for c in chunks), out.seconds)
        self.delivery.first_tokens(chunks, out)

    def _fuses(self, batch: Seq[Sequence]) -> bool:
        """Whether a step over `batch` would be a plain one that can take prompt chunks in its
        forward (never with no rows decoding)."""
        if not batch or not self.runner.fuses_prompts:
            return False
        return self.policy.k_for(len(batch), int(sum(len(s) for s in batch) / len(batch))) == 0

    async def _decode_with(
        self,
        batch: list[Sequence],
        context: float,
        row_start: int,
        chunks: list[PromptChunk],
        items: list[PrefillItem],
    ) -> None:
        """One forward for a plain step over `batch` and the prompt chunks after it. Its time
        is not published as a plain step's: the chunks' work is in it. If it fails, the plain
        step and each chunk run apart (a failed call leaves the rows as they were), so that one
        request's failure never ends another's."""
        try:
            out, prefill = await self._compute(self.runner.decode_with_prompts, len(batch), items)
        except Exception:
            log.exception("decode step with prompt chunks failed; running its parts apart")
            await self._plain_step(batch, context)
            await self._prefill(row_start, chunks, items)
            return
        self.pacer.prefilled_beside_step(sum(c.end - c.start for c in chunks), out.step_seconds, len(batch))
        self.delivery.first_tokens(chunks, prefill)
        self.delivery.decoded(batch, context, out, timed=False, with_prompts=True)

    async def _plain_step(self, batch: list[Sequence], context: float) -> None:
        try:
            out = await self._compute(self.runner.decode, len(batch), 0)
        except Exception as exc:  # contained: only this batch fails
            log.exception("decode step failed")
            for sequence in batch:
                sequence.fail("error", f"decode step failed: {type(exc).__name__}: {exc}")
            return
        self.delivery.decoded(batch, context, out, timed=False)

    async def _decode(self) -> None:
        step = self._ahead if self._ahead is not None else await self._launch()
        self._ahead = None
        if step is None:
            return
        try:
            out = await step.result
        except Exception as exc:  # contained: only this batch fails
            log.exception("decode step failed")
            for sequence in step.batch:
                sequence.fail("error", f"decode step failed: {type(exc).__name__}: {exc}")
            return
        overlapped = self._batch_stays(step.batch, out)
        if overlapped:
            lengths = [len(s) + len(t) for s, t in zip(step.batch, out.tokens, strict=True)]
            self._ahead = self._submit_decode(step.batch, lengths)
        self.delivery.decoded(step.batch, step.context, out, overlapped=overlapped)

    async def _launch(self) -> DecodeInFlight | None:
        await self._move(self.scheduler.compact())  # some may have finished at their first token
        batch = list(self.scheduler.running)
        return self._submit_decode(batch, [len(s) for s in batch]) if batch else None

    def _submit_decode(self, batch: list[Sequence], lengths: list[int]) -> DecodeInFlight:
        context = sum(lengths) / len(batch)
        size, length = len(batch), int(context)
        k, method = self.policy.k_for(size, length), self.policy.method_for(size, length)
        return DecodeInFlight(batch, context, self._submit(self.runner.decode, size, k, method))

    def _batch_stays(self, batch: list[Sequence], out: DecodeOutput) -> bool:
        """Whether the next step may start before this one's tokens are streamed.

        Only when nothing can change the batch in between: no prompt waits to be admitted,
        and no row can end with these tokens (a check on ids and counts, without text). The
        loop then detokenizes and streams while the compute thread runs the next step, as
        vLLM's async scheduling and SGLang's overlap scheduler do; the step's tokens are
        already in the runner's rows, so its output is the same.
        """
        if self.config.overlap != "on" or self.scheduler.waiting or self.scheduler.partial is not None:
            return False
        eos = self.runner.eos_token_ids
        return not any(s.may_finish_with(t, eos) for s, t in zip(batch, out.tokens, strict=True))

    async def _move(self, moves: RowMoves) -> None:
        """Applies the scheduler's row moves to the KV cache. Not contained: if this fails, which
        row holds which request is unknown, so the loop stops."""
        if moves.srcs:
            await self._compute(self.runner.move_rows, moves.srcs, moves.dsts)

    async def _compute(self, fn: Callable[..., T], *args: object) -> T:
        return await self._submit(fn, *args)

    def _submit(self, fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
        """Starts `fn` on the compute thread; its steps run in the order they are submitted."""
        if self._executor is None:
            raise EngineStoppedError("the engine is not running")
        return asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
