"""docs/architecture.md's "Where do I change X" table: every `file: symbol` names a file that
exists and a top-level class, function or assignment of that name in it (a rename that leaves the
table behind fails here)."""

from __future__ import annotations

import ast
import re

from tests.helpers import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"
ENTRY = re.compile(r"^\| [^|]+ \| `(?P<file>[\w/.]+\.py): (?P<symbol>\w+)` \|$")


def where_to_change() -> list[tuple[str, str]]:
    text = DOC.read_text()
    section = text.split("## Where do I change X", 1)[1].split("\n## ", 1)[0]
    return [(m["file"], m["symbol"]) for line in section.splitlines() if (m := ENTRY.match(line))]


def top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_entry_resolves_to_a_file_and_a_symbol() -> None:
    entries = where_to_change()
    assert len(entries) >= 15, "the table was not found or lost its entries"
    missing = []
    for file, symbol in entries:
        path = REPO_ROOT / file
        if not path.is_file():
            missing.append(f"{file}: no such file")
        elif symbol not in top_level_names(ast.parse(path.read_text())):
            missing.append(f"{file}: no top-level {symbol}")
    assert not missing, missing
