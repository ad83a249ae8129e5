"""``docs/hardening.md`` stays true: every promise names the tests that check it, and the
"Known open issues" list is exactly the set of strict expected failures in the tests.

Each open issue names its test as ``tests/test_x.py::test_name``; that test must be marked
``pytest.mark.xfail(strict=True)``, so fixing the issue turns it red until the marker and the
list item go. Every ``xfail`` in the tests must be such a listed issue.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "hardening.md"
TEST_REF = re.compile(r"`(tests/test_\w+\.py)(?:::(test_\w+))?`")


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/hardening.md has no '## {title}' section"
    return match.group(1)


def _bullets(section: str) -> list[str]:
    """Top-level ``*`` items, each with its continuation lines."""
    return [item.strip() for item in re.split(r"^\* ", section, flags=re.M)[1:]]


def _xfails() -> dict[tuple[str, str], bool]:
    """(file, test) -> strict, for every test function with an ``xfail`` mark."""
    found = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("mark.xfail"):
                    strict = any(
                        k.arg == "strict" and isinstance(k.value, ast.Constant) and k.value.value is True
                        for k in decorator.keywords
                    )
                    found[(f"tests/{path.name}", node.name)] = strict
    return found


def _test_functions(file: str) -> set[str]:
    tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_open_issue_is_a_strict_xfail_and_every_xfail_is_listed() -> None:
    issues = _bullets(_section(DOC.read_text(encoding="utf-8"), "Known open issues"))
    listed: set[tuple[str, str]] = set()
    for issue in issues:
        refs = [(file, test) for file, test in TEST_REF.findall(issue) if test]
        assert refs, f"open issue without its test (`tests/test_x.py::test_name`): {issue[:80]!r}"
        listed.update(refs)
    xfails = _xfails()
    for ref in sorted(listed):
        assert ref in xfails, f"{ref[0]}::{ref[1]} is listed as an open issue but is not marked xfail (fixed? remove it)"
        assert xfails[ref], f"{ref[0]}::{ref[1]} must be xfail(strict=True)"
    unlisted = sorted(set(xfails) - listed)
    assert not unlisted, f"xfail tests missing from docs/hardening.md 'Known open issues': {unlisted}"


def test_every_test_the_document_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    refs = TEST_REF.findall(text)
    assert len(refs) > 20
    for file, test in refs:
        assert (ROOT / file).is_file(), f"docs/hardening.md names {file}, which does not exist"
        if test:
            assert test in _test_functions(file), f"docs/hardening.md names {file}::{test}, which does not exist"


def test_every_hardening_test_file_is_in_the_document() -> None:
    named = {file for file, _ in TEST_REF.findall(DOC.read_text(encoding="utf-8"))}
    files = {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_hardening_*.py")}
    assert files <= named, f"not described in docs/hardening.md: {sorted(files - named)}"
