"""Request intake: what a prompt must be before it may queue, and the Sequence it becomes.

Everything here runs before the request touches the scheduler, so a refusal costs nothing
and names what to change. `encode` is thread-safe: servers tokenize off the event loop.
"""

from __future__ import annotations

import random
from collections.abc import Sequence as Seq

from adaptivespec.engine.sampling import SAMPLING_DTYPE, SamplingParams
from adaptivespec.engine.sequence import Sequence
from adaptivespec.engine.tokenizer import Tokenizer, longest_token_chars
from adaptivespec.errors import InvalidRequestError


class Intake:
    def __init__(self, tokenizer: Tokenizer, max_context: int, vocab_rows: int, seed: int) -> None:
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.vocab_rows = vocab_rows  # token ids a prompt may hold
        self.max_prompt_chars = max_context * longest_token_chars(tokenizer)  # more cannot fit
        self._seeds = random.Random(seed)  # seeds of requests that bring none

    def encode(self, prompt: str) -> list[int]:
        """Token ids of a text prompt; text too long to fit is refused by its length, untokenized."""
        if not prompt:
            raise InvalidRequestError("prompt is empty; send at least one character", "prompt")
        self.check_characters(len(prompt), "prompt")
        check_text(prompt, "prompt")
        return list(self.tokenizer.encode(prompt, add_special_tokens=True))

    def check_characters(self, characters: int, param: str) -> None:
        """Refuses text that cannot fit the context, by its length alone (chat messages too)."""
        if characters > self.max_prompt_chars:
            raise InvalidRequestError(
                f"{param} has {characters} characters, more than a context of {self.max_context} "
                f"tokens can hold; shorten the {param}",
                param,
            )

    def sequence(self, prompt: str | Seq[int], params: SamplingParams) -> Sequence:
        """A validated request, ready to queue."""
        params.check_fits(SAMPLING_DTYPE)
        ids = self.encode(prompt) if isinstance(prompt, str) else self._checked_ids(prompt)
        self._check_length(ids, params)
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
        return Sequence(ids, params, seed, self.max_context, self.tokenizer)

    def _checked_ids(self, prompt: Seq[int]) -> list[int]:
        ids = [int(t) for t in prompt]
        if not ids:
            raise InvalidRequestError("prompt is empty; send at least one token", "prompt")
        if any(t < 0 or t >= self.vocab_rows for t in ids):
            raise InvalidRequestError(f"prompt token ids must be in [0, {self.vocab_rows})", "prompt")
        return ids

    def _check_length(self, ids: list[int], params: SamplingParams) -> None:
        limit = self.max_context
        if len(ids) >= limit:
            raise InvalidRequestError(
                f"prompt has {len(ids)} tokens but the context holds {limit}; shorten the prompt", "prompt"
            )
        if len(ids) + params.max_tokens > limit:
            raise InvalidRequestError(
                f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the "
                f"context of {limit} tokens; lower max_tokens to at most {limit - len(ids)}",
                "max_tokens",
            )


def check_text(text: str, param: str) -> None:
    """Refuses text that is not valid Unicode: a lone surrogate (JSON allows "\\ud800") has no
    UTF-8 form, so no tokenizer can read it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"{param} holds an unpaired surrogate (\\u{ord(text[exc.start]):04x}) at character "
            f"{exc.start}; send valid Unicode text",
            param,
        ) from exc
