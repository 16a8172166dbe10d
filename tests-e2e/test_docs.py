"""The documentation's relative links: every file they name exists, and every #anchor is a heading there."""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: pathlib.Path) -> set[str]:
    """GitHub's: a heading's text lowercased, punctuation dropped, spaces to hyphens; a repeated one gets -1, -2…"""
    seen: dict[str, int] = {}
    found = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def links(page: pathlib.Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+://", target)]


def broken_links(page: pathlib.Path) -> list[str]:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert not broken_links(page)


def test_the_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Same\n\n## Same\n\n[ok](#same-1) [bad](#nowhere) [file](missing.md)\n"
                    "```\n[in code](#ignored)\n```\n")
    assert broken_links(page) == ["#nowhere: no heading #nowhere in page.md", f"missing.md: no file {tmp_path}/missing.md"]


def test_the_readme_is_a_quick_start():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
