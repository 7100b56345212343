"""Prompt material every machine has: functions of the standard library's sources, and chat
requests rendered through a tokenizer's template. The benchmarks' traffic mixes and
`train-draft`'s prompts are built from them."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from adaptivespec.engine.tokenizer import Tokenizer

_MIN_LINES, _MAX_LINES = 6, 30


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    source: str
    names: tuple[str, ...]  # identifiers assigned or taken as arguments in it


def functions(documents: list[str]) -> list[Function]:
    """Top-level functions and methods of 6-30 lines, in the documents' order."""
    found: list[Function] = []
    for text in documents:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.end_lineno is None:
                continue
            if not _MIN_LINES <= node.end_lineno - node.lineno + 1 <= _MAX_LINES:
                continue
            names = {a.arg for a in node.args.args if a.arg not in ("self", "cls")}
            names |= {
                t.id
                for n in ast.walk(node)
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            if names:
                source = _dedent(lines[node.lineno - 1 : node.end_lineno])
                found.append(Function(node.name, source, tuple(sorted(names))))
    return found


def _dedent(lines: list[str]) -> str:
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines)


def chat_ids(tokenizer: Tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The messages as the model is prompted with them (its chat template, when it has one)."""
    template = getattr(tokenizer, "chat_template", None)
    if template:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)  # type: ignore[attr-defined]
        return list(tokenizer.encode(str(text), add_special_tokens=False))
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    return list(tokenizer.encode(text, add_special_tokens=False))
