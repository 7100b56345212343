"""The part of a tokenizer the engine uses, so runners without a real model can bring their own."""

from __future__ import annotations

from typing import Protocol


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str | list[str]: ...

    def __len__(self) -> int: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens: what the simulator streams, where no vocabulary exists."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        return bytes(token_ids).decode("utf-8", errors="replace")

    def __len__(self) -> int:
        return 256


def longest_token_chars(tokenizer: Tokenizer) -> int:
    """The most characters one token can stand for, so a text's length bounds its token count.

    A vocabulary entry's spelling (byte-level "Ġ" symbols included) is never shorter than the
    text it decodes to, so the longest entry is a sound bound; without a vocabulary (bytes as
    tokens) a token is at most one character.
    """
    vocab = getattr(tokenizer, "get_vocab", None)
    if vocab is None:
        return 1
    return max((len(piece) for piece in vocab()), default=1)
