"""Named traffic mixes, built from the Python standard library on this machine (no download).

- `chat`: windows of held-out source text, as the benches always used.
- `code-edit`: a function and an instruction to change it a little, so that most of the
  answer copies the input (renames, a docstring, a comment).
- `agent`: turns of tool-using sessions. Each turn's prompt holds the session's earlier turns,
  and every session calls the same tools with the same JSON, as agents' traffic does.
- `mixed`: the three interleaved.

Prompts go through the model's chat template when it has one. A seed picks the functions,
names and sessions, so another seed gives other prompts (drawn independently: two seeds'
sets may share a function, though the 8-prompt sets of seeds 0 and 1 share none).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.prompt_text import chat_ids, functions
from adaptivespec.engine.tokenizer import Tokenizer

MIXES = ("chat", "code-edit", "agent", "mixed")
_TOOLS = [
    {"name": "search", "description": "find where a name is defined", "parameters": {"query": "string"}},
    {"name": "read_file", "description": "read lines of a file", "parameters": {"path": "string"}},
    {
        "name": "run_python",
        "description": "run a snippet and return its output",
        "parameters": {"code": "string"},
    },
]
_AGENT_SYSTEM = (
    "You are a coding agent. You can call these tools:\n"
    + json.dumps(_TOOLS, indent=1)
    + '\nTo call a tool, reply with one JSON object: {"tool": NAME, "arguments": {...}}.'
)


def code_edit(tokenizer: Tokenizer, count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng([seed, 2])
    pool = functions(held_out_documents())
    prompts = []
    for index in rng.choice(len(pool), size=min(count, len(pool)), replace=False):
        function = pool[int(index)]
        old = function.names[int(rng.integers(len(function.names)))]
        instructions = (
            f"Rename `{old}` to `{old}_value` in this function. Reply with the whole function.",
            f"Add a one-line docstring to `{function.name}`. Reply with the whole function.",
            f"Add the comment `# checked` above the first line of `{function.name}`'s body. "
            "Reply with the whole function.",
        )
        instruction = instructions[int(rng.integers(len(instructions)))]
        content = f"{instruction}\n\n```python\n{function.source}\n```"
        prompts.append(chat_ids(tokenizer, [{"role": "user", "content": content}]))
    return prompts


def agent(tokenizer: Tokenizer, count: int, seed: int, turns: int = 3) -> list[list[int]]:
    """Sessions of `turns` requests each, interleaved: turn t's prompt holds turns 0..t-1."""
    rng = np.random.default_rng([seed, 3])
    pool = functions(held_out_documents())
    sessions = []
    for index in rng.choice(len(pool), size=max(1, -(-count // turns)), replace=False):
        function = pool[int(index)]
        messages = [
            {"role": "system", "content": _AGENT_SYSTEM},
            {"role": "user", "content": f"What does `{function.name}` return? Find it and check."},
        ]
        steps = [
            (
                {"tool": "search", "arguments": {"query": f"def {function.name}"}},
                f"found: def {function.name}",
            ),
            ({"tool": "read_file", "arguments": {"path": f"{function.name}.py"}}, function.source),
            (
                {"tool": "run_python", "arguments": {"code": f"help({function.name})"}},
                f"{function.name}(...)",
            ),
        ]
        session = [list(messages)]
        for call, result in steps[: turns - 1]:
            messages += [
                {"role": "assistant", "content": json.dumps(call)},
                {"role": "user", "content": f"Tool result:\n{result}"},
            ]
            session.append(list(messages))
        sessions.append([chat_ids(tokenizer, m) for m in session])
    # Turn by turn across sessions: later turns come after other sessions' earlier ones.
    return [s[t] for t in range(turns) for s in sessions][:count]


def chat(tokenizer: Tokenizer, count: int, seed: int, length: int = 256) -> list[list[int]]:
    corpus = tokenizer.encode("\n".join(held_out_documents()), add_special_tokens=False)
    starts = np.random.default_rng([seed, 1]).integers(0, len(corpus) - length, size=count)
    return [list(corpus[int(s) : int(s) + length]) for s in starts]


def prompts(mix: str, tokenizer: Tokenizer, count: int, seed: int = 0) -> list[list[int]]:
    """`count` prompts (token ids) of the named mix."""
    builders: dict[str, Callable[[Tokenizer, int, int], list[list[int]]]] = {
        "chat": chat,
        "code-edit": code_edit,
        "agent": agent,
    }
    if mix == "mixed":
        parts = [builders[name](tokenizer, -(-count // 3), seed) for name in ("chat", "code-edit", "agent")]
        return [p for group in zip(*parts, strict=False) for p in group][:count]
    if mix not in builders:
        raise ValueError(f"traffic mix must be one of {MIXES}, got {mix!r}")
    return builders[mix](tokenizer, count, seed)
