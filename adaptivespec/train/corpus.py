"""Prompts to train a head on, from text every machine has: the Python standard library.

Only the files the benchmarks never draw from (`training_documents`, the complement of
`held_out_documents`), so a head is measured on prompts it has not seen. Two shapes, as the
served traffic has them: raw windows of source text for the target to continue, and chat
requests about one function (explain it, or change it a little and reply with it whole).
"""

from __future__ import annotations

import numpy as np

from adaptivespec.engine.demo_models import training_documents
from adaptivespec.engine.prompt_text import chat_ids, functions
from adaptivespec.engine.tokenizer import Tokenizer

SHAPES = 2  # training_prompts interleaves its shapes: raw window, chat request, raw window, ...
_ASKS = (
    "Explain what `{name}` does, briefly.",
    "Add a one-line docstring to `{name}`. Reply with the whole function.",
    "Rename the variables of `{name}` to clearer names. Reply with the whole function.",
    "Write a short usage example for `{name}`.",
)


def training_prompts(
    tokenizer: Tokenizer, count: int, seed: int, window: int = 192, text: str | None = None
) -> list[list[int]]:
    """`count` prompts (token ids), half raw windows and half chat requests, interleaved; or,
    given `text` (an operator's own samples of their traffic), windows of it alone."""
    rng = np.random.default_rng([seed, 28])
    if text is not None:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) < 2:
            raise ValueError("the training text holds fewer than two tokens")
        sizes = rng.integers(1, min(window, len(ids) - 1) + 1, size=count)
        starts = [int(rng.integers(0, len(ids) - size + 1)) for size in sizes]
        return [list(ids[s : s + int(size)]) for s, size in zip(starts, sizes, strict=True)]
    documents = training_documents()
    text = _enough(documents[::2], chars=max(200_000, 40 * window * count))
    corpus = tokenizer.encode(text, add_special_tokens=False)
    offsets = rng.integers(0, max(1, len(corpus) - window), size=count - count // 2)
    windows = [list(corpus[int(s) : int(s) + window]) for s in offsets]
    pool = functions(documents[1::2][: 20 + count])
    picks = rng.choice(len(pool), size=count // 2, replace=len(pool) < count // 2)
    chats = []
    for index in picks:
        function = pool[int(index)]
        ask = _ASKS[int(rng.integers(len(_ASKS)))].format(name=function.name)
        content = f"{ask}\n\n```python\n{function.source}\n```"
        chats.append(chat_ids(tokenizer, [{"role": "user", "content": content}]))
    mixed = [p for pair in zip(windows, chats, strict=False) for p in pair]
    return mixed + windows[len(chats) :]


def _enough(documents: list[str], chars: int) -> str:
    """The documents, in order, up to about `chars` characters (tokenizing all would take long)."""
    taken, size = [], 0
    for document in documents:
        taken.append(document)
        size += len(document)
        if size >= chars:
            break
    return "\n".join(taken)
