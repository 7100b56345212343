"""What a finished forward does to its requests: each row's new tokens (up to its stop), the
engine's running totals, and the step's telemetry record."""

from __future__ import annotations

from adaptivespec.engine.prefill_pacer import PrefillPacer
from adaptivespec.engine.records import EngineTotals
from adaptivespec.engine.runner import DecodeOutput, PrefillOutput, Runner
from adaptivespec.engine.scheduler import PromptChunk
from adaptivespec.engine.sequence import Sequence
from adaptivespec.engine.telemetry import TelemetryBus, decode_record


class Delivery:
    def __init__(self, runner: Runner, telemetry: TelemetryBus, pacer: PrefillPacer) -> None:
        """`pacer` learns a decode step's time from every step delivered alone."""
        self._runner, self._telemetry, self._pacer = runner, telemetry, pacer
        self.steps = 0  # decode steps delivered
        self.totals = EngineTotals()

    def first_tokens(self, chunks: list[PromptChunk], out: PrefillOutput) -> None:
        """Each prompt whose last chunk went in gets its first token."""
        for chunk, token in zip(chunks, out.first_tokens, strict=True):
            if token is None:
                continue  # more of its prompt goes in next step
            self.totals.prompt_tokens += len(chunk.sequence.prompt_ids)
            self.totals.generation_tokens += chunk.sequence.add_tokens([token], self._runner.eos_token_ids)

    def decoded(
        self,
        batch: list[Sequence],
        context: float,
        out: DecodeOutput,
        *,
        timed: bool = True,
        overlapped: bool = False,
        with_prompts: bool = False,
    ) -> None:
        """A decode step's tokens. `timed`: the step was a decode step alone, so its time is the
        pacer's and telemetry's; `overlapped`: the next step was submitted before this one's
        tokens streamed; `with_prompts`: prompt chunks went through its forward."""
        self.steps += 1
        self.totals.overlapped_steps += overlapped
        self.totals.steps_with_prompts += with_prompts
        if timed:
            self._pacer.decoded(out.step_seconds, len(batch))
        kept = 0
        for sequence, tokens, drafted, accepted in zip(
            batch, out.tokens, out.drafted, out.accepted, strict=True
        ):
            sequence.stats.steps += 1
            sequence.stats.drafted += drafted
            sequence.stats.accepted += accepted
            if not sequence.finished:
                kept += sequence.add_tokens(tokens, self._runner.eos_token_ids)
        self.totals.generation_tokens += kept
        if not timed:
            return
        runner = self._runner
        keys = {"model_key": runner.model_key, "hardware_key": runner.hardware_key}
        self._telemetry.publish(
            decode_record(out, **keys, batch_size=len(batch), context=context, emitted=kept)
        )
