"""Incremental detokenization: the text of a growing token sequence, in O(1) decode work per token.

Decoding the whole output every step is quadratic, and decoding only the new tokens loses
what depends on their neighbours: byte-level merges, multi-byte characters split across
tokens, and SentencePiece's leading space (dropped when a piece starts a decode). So each
step decodes a short window that starts a few tokens back, seeded with the prompt's tail,
and keeps the difference between the window with and without the new tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from adaptivespec.engine.tokenizer import Tokenizer

PROMPT_CONTEXT = 5  # prompt tokens the first window starts with (vLLM uses 5 too)


class Detokenizer:
    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int]) -> None:
        self._decode_ids = window_decoder(tokenizer)
        self._window = list(prompt_ids[-PROMPT_CONTEXT:])
        self._context = len(self._window)  # leading window ids whose text is already out (or the prompt's)
        self.text = ""

    def extend(self, token_ids: Sequence[int], flush: bool = False) -> str:
        """Adds tokens and returns the whole text so far.

        Text that ends in a partial character is held until the next tokens complete it,
        unless the sequence is finishing (`flush`).
        """
        self._window.extend(token_ids)
        before = self._decode_ids(self._window[: self._context])
        after = self._decode_ids(self._window)
        if flush or not after.endswith("\ufffd"):
            self.text += after[len(before) :]
            # The tokens just shown are the next window's context. Advance even when nothing was
            # added (skipped special tokens), or the window would grow without bound.
            del self._window[: self._context]
            self._context = len(self._window)
        return self.text


def window_decoder(tokenizer: Tokenizer) -> Callable[[list[int]], str]:
    """The text of a few ids, special tokens skipped.

    A fast transformers tokenizer decodes in its Rust backend and then, only when
    `clean_up_tokenization_spaces` is set, rewrites spaces in Python; without that flag the
    backend's text is the result, and calling it directly skips the wrapper's argument
    handling, which costs three times the decode itself on a window of a few ids.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and getattr(tokenizer, "clean_up_tokenization_spaces", True) is False:
        return lambda ids: str(backend.decode(ids, skip_special_tokens=True))
    return lambda ids: str(tokenizer.decode(ids, skip_special_tokens=True))
