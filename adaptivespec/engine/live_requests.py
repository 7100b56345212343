"""The requests whose stream has not ended, by id: what `abort` finds, and what each stream
reports its end to."""

from __future__ import annotations

from collections.abc import Callable

from adaptivespec.engine.request_stream import RequestStream
from adaptivespec.engine.sequence import Sequence


class LiveRequests:
    def __init__(self, on_abort: Callable[[], None]) -> None:
        """`on_abort`: called after a running request was aborted (the engine wakes to free its row)."""
        self._on_abort = on_abort
        self._live: dict[str, Sequence] = {}
        self._next_id = 0

    def open(self, sequence: Sequence) -> RequestStream:
        """A new id for a queued sequence, and the stream its events arrive on."""
        self._next_id += 1
        request_id = f"req-{self._next_id}"
        self._live[request_id] = sequence
        return RequestStream(request_id, len(sequence.prompt_ids), sequence.events, self._ended)

    def abort(self, request_id: str) -> None:
        """Ends a request that has not finished; an unknown or finished id is a no-op."""
        sequence = self._live.pop(request_id, None)
        if sequence is not None and not sequence.finished:
            sequence.abort()
            self._on_abort()

    def _ended(self, request_id: str, aborted: bool) -> None:
        if aborted:
            self.abort(request_id)
        else:
            self._live.pop(request_id, None)
