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
