"""One request as the engine sees it: its tokens, its stop conditions, and its output stream."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable
from dataclasses import dataclass

from adaptivespec.engine.sampling import SamplingParams
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
    def __init__(self, prompt_ids: list[int], params: SamplingParams, seed: int, max_context: int) -> None:
        self.prompt_ids = prompt_ids
        self.params = params
        self.seed = seed
        self.max_context = max_context
        self.output_ids: list[int] = []
        self.status = Status.WAITING
        self.aborted = False
        self.slot = -1
        self.stats = SequenceStats()
        self.events: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self._sent_text = ""
        self._text = ""  # detokenized output so far
        self._prefix = 0  # detokenization window: output_ids[_prefix:] is re-decoded each step
        self._read = 0
        self._stop_len = max((len(s) for s in params.stop), default=0)

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def abort(self) -> None:
        self.aborted = True

    def add_tokens(self, tokens: Iterable[int], eos_ids: frozenset[int], tokenizer: Tokenizer) -> None:
        """Appends tokens up to the first stop condition, then emits what is safe to show."""
        finish: str | None = None
        new: list[int] = []
        for token in tokens:
            new.append(token)
            if token in eos_ids and not self.params.ignore_eos:
                finish = "stop"
            elif (
                len(self.output_ids) + len(new) >= self.params.max_tokens
                or len(self) + len(new) >= self.max_context
            ):
                finish = "length"
            if finish:
                break
        self.output_ids.extend(new)
        text = self._detokenize(tokenizer, flush=finish is not None)
        cut = self._stop_cut(text)
        if cut is not None:
            text, finish = text[:cut], "stop"
        shown = text if finish else text[: len(text) - self._held_back(text)]
        self._emit(tuple(new), shown, finish)

    def _detokenize(self, tokenizer: Tokenizer, flush: bool) -> str:
        """Incremental: decodes a window of a few tokens per step, not the whole output.

        The window starts a few tokens back (prefix) so that byte-level merges and multi-byte
        characters decode as they would in the full text; a window ending in a partial
        character waits for the next tokens unless the sequence is finishing.
        """
        ids = self.output_ids
        before = str(tokenizer.decode(ids[self._prefix : self._read], skip_special_tokens=True))
        after = str(tokenizer.decode(ids[self._prefix :], skip_special_tokens=True))
        if len(after) > len(before) and (flush or not after.endswith("\ufffd")):
            self._text += after[len(before) :]
            self._prefix, self._read = self._read, len(ids)
        return self._text

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

    def _stop_cut(self, text: str) -> int | None:
        if not self.params.stop:
            return None
        start = max(0, len(self._sent_text) - self._stop_len)
        hits = [i for i in (text.find(s, start) for s in self.params.stop) if i >= 0]
        return min(hits) if hits else None

    def _held_back(self, text: str) -> int:
        """Characters at the end that may still become a stop string or a multi-byte character."""
        partial = len(text) - len(text.rstrip("\ufffd"))
        if partial:
            return partial
        for size in range(min(self._stop_len - 1, len(text)), 0, -1):
            if any(s.startswith(text[-size:]) for s in self.params.stop):
                return size
        return 0
