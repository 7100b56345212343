"""docs/data holds only the data the documents cite: every file cited exists, and every file
there is cited (a folder cited whole cites every file in it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
# A markdown link from docs/ ("data/x.json"), or a path from the repository root ("docs/data/x.json").
CITATION = re.compile(r"(?:\]\(|`|\s|^)(?:docs/)?(data/[A-Za-z0-9_./-]+)")


def cited(texts: list[str]) -> set[Path]:
    """The data paths the texts cite; a path in a command template (an upper-case placeholder
    such as HW, or "...") stands for files the rows cite by name, and is not one itself."""
    paths = set()
    for text in texts:
        for match in CITATION.finditer(text):
            path = match.group(1).rstrip(".,;:")
            if path != path.lower() or "..." in path:
                continue
            paths.add(ROOT / "docs" / path)
    return paths


def documents() -> list[str]:
    files = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    return [path.read_text() for path in files]


def test_every_cited_data_file_exists() -> None:
    missing = sorted(str(p.relative_to(ROOT)) for p in cited(documents()) if not p.exists())
    assert missing == []


def test_every_data_file_is_cited() -> None:
    citations = cited(documents())
    folders = {p for p in citations if p.is_dir()}
    uncited = sorted(
        str(path.relative_to(ROOT))
        for path in DATA.rglob("*")
        if path.is_file() and path not in citations and not any(f in path.parents for f in folders)
    )
    assert uncited == []


def test_the_citation_pattern_reads_both_forms() -> None:
    found = cited(["see [x](data/a/b.json), or `docs/data/c.json`; data/d/ too; not data/HW-T.json."])
    assert found == {ROOT / "docs/data/a/b.json", ROOT / "docs/data/c.json", ROOT / "docs/data/d"}
