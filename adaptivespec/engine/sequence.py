"""One request as the engine sees it: its tokens, its stop conditions, and its output stream."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable
from dataclasses import dataclass

from adaptivespec.engine.detokenizer import Detokenizer
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.stops import StopMatcher
from adaptivespec.engine.tokenizer import Tokenizer


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """What a consumer receives: new tokens and the text they complete, or the end."""

    token_ids: tuple[int, ...]
    text: str
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    error: str | None = None


@dataclass(slots=True)
class SequenceStats:
    steps: int = 0
    drafted: int = 0
    accepted: int = 0


class Sequence:
    def __init__(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        seed: int,
        max_context: int,
        tokenizer: Tokenizer,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.params = params
        self.seed = seed
        self.max_context = max_context
        self.output_ids: list[int] = []
        self.status = Status.WAITING
        self.aborted = False
        self.slot = -1
        self.prefilled = 0  # prompt tokens in the KV cache; below the prompt's length while chunked
        self.stats = SequenceStats()
        self.events: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self._sent_text = ""
        self._detokenizer = Detokenizer(tokenizer, prompt_ids)
        self._stops = StopMatcher(params.stop)

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def abort(self) -> None:
        self.aborted = True

    def add_tokens(self, tokens: Iterable[int], eos_ids: frozenset[int]) -> int:
        """Appends tokens up to the first stop condition, emits what is safe to show, returns how many.

        A step may emit several tokens (accepted drafts plus a bonus); those after a stop
        condition are dropped, so they are neither returned nor counted.
        """
        finish: str | None = None
        new: list[int] = []
        text = self._detokenizer.text
        for token in tokens:
            new.append(token)
            finish = self._limit_reached(token, len(new), eos_ids)
            if self._stops:  # token by token, so the tokens after a stop string are known
                text, finish = self._match_stops([token], finish)
            if finish:
                break
        if not self._stops:
            text = self._detokenizer.extend(new, flush=finish is not None)
        self.output_ids.extend(new)
        shown = text if finish else text[: len(text) - self._stops.held_back(text)]
        self._emit(tuple(new), shown, finish)
        return len(new)

    def may_finish_with(self, tokens: Iterable[int], eos_ids: frozenset[int]) -> bool:
        """Whether adding these tokens could end the request. Stop strings can only be told
        from the text, so a request that has any may always finish."""
        if self._stops or self.aborted:
            return True
        return any(self._limit_reached(t, i, eos_ids) for i, t in enumerate(tokens, start=1))

    def _limit_reached(self, token: int, pending: int, eos_ids: frozenset[int]) -> str | None:
        if token in eos_ids and not self.params.ignore_eos:
            return "stop"
        if (
            len(self.output_ids) + pending >= self.params.max_tokens
            or len(self) + pending >= self.max_context
        ):
            return "length"
        return None

    def _match_stops(self, tokens: list[int], finish: str | None) -> tuple[str, str | None]:
        checked = len(self._detokenizer.text)
        text = self._detokenizer.extend(tokens, flush=finish is not None)
        cut = self._stops.find(text, checked)
        return (text, finish) if cut is None else (text[:cut], "stop")

    def fail(self, reason: str, error: str | None = None) -> None:
        """Ends the stream now (abort, engine error, shutdown)."""
        if not self.finished:
            self._emit((), self._sent_text, reason, error)

    def _emit(
        self, tokens: tuple[int, ...], shown: str, finish: str | None, error: str | None = None
    ) -> None:
        delta = shown[len(self._sent_text) :]  # the text only grows; held-back text was never sent
        self._sent_text += delta
        if finish:
            self.status = Status.FINISHED
        if tokens or delta or finish:
            self.events.put_nowait(TokenEvent(tokens, delta, finish, error))
