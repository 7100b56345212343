"""Incremental detokenization: the text of a growing token sequence, in O(1) decode work per token.

Decoding the whole output every step is quadratic, and decoding only the new tokens loses
what depends on their neighbours: byte-level merges, multi-byte characters split across
tokens, and SentencePiece's leading space (dropped when a piece starts a decode). So each
step decodes a short window that starts a few tokens back, seeded with the prompt's tail,
and keeps the difference between the window with and without the new tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from adaptivespec.engine.tokenizer import Tokenizer

PROMPT_CONTEXT = 5  # prompt tokens the first window starts with (vLLM uses 5 too)


class Detokenizer:
    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int]) -> None:
        self._tokenizer = tokenizer
        self._ids = list(prompt_ids[-PROMPT_CONTEXT:])
        self._prefix = 0  # the window is _ids[_prefix:]; _ids[_prefix:_read] was decoded before
        self._read = len(self._ids)
        self.text = ""

    def extend(self, token_ids: Sequence[int], flush: bool = False) -> str:
        """Adds tokens and returns the whole text so far.

        Text that ends in a partial character is held until the next tokens complete it,
        unless the sequence is finishing (`flush`).
        """
        self._ids.extend(token_ids)
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        if flush or not after.endswith("\ufffd"):
            self.text += after[len(before) :]
            # Advance even when nothing was added (skipped special tokens), or the window grows.
            self._prefix, self._read = self._read, len(self._ids)
            del self._ids[: self._prefix]
            self._read -= self._prefix
            self._prefix = 0
        return self.text

    def _decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))
