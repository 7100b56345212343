"""What the engine asks before each decode step: how many tokens to draft, and with which drafter.

The engine owns this interface; the controller's published snapshot and the static policies
implement it. Both calls run once per step, so they must be O(1) and lock-free.
"""

from __future__ import annotations

from typing import Protocol


class SpecPolicy(Protocol):
    def k_for(self, batch_size: int, context_len: int) -> int:
        """The draft length K; 0 runs a plain step."""
        ...

    def method_for(self, batch_size: int, context_len: int) -> str | None:
        """The drafter that drafts at K > 0 ("ngram", "draft", "suffix", "eagle3"); None: the
        runner's first."""
        ...
