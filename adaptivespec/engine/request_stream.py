"""One request's stream of token events, and the handle that ends it.

A plain async iterator over the request's event queue, not an async generator: ending a
request is an explicit `abort()` by request id, which works whether or not the stream was
ever iterated, and never meets a generator that is mid-await.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from adaptivespec.engine.sequence import TokenEvent


class RequestStream:
    """Iterate for the request's events; the last one carries its finish reason.

    `abort()` ends the request if it has not finished (a no-op otherwise). A consumer
    cancelled while it waits for the next event aborts the request too: nobody would read it.
    """

    def __init__(
        self,
        request_id: str,
        prompt_tokens: int,
        events: asyncio.Queue[TokenEvent],
        on_end: Callable[[str, bool], None],
    ) -> None:
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self._events = events
        self._on_end = on_end  # (request_id, aborted): the engine forgets or aborts the request
        self._ended = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> TokenEvent:
        if self._ended:
            raise StopAsyncIteration
        try:
            event = await self._events.get()
        except asyncio.CancelledError:
            self.abort()
            raise
        if event.finish_reason is not None:
            self._end(aborted=False)
        return event

    @property
    def ended(self) -> bool:
        return self._ended

    def abort(self) -> None:
        if not self._ended:
            self._end(aborted=True)

    async def aclose(self) -> None:
        """The async-iterator protocol's close: the same as `abort()`."""
        self.abort()

    def _end(self, aborted: bool) -> None:
        self._ended = True
        self._on_end(self.request_id, aborted)
