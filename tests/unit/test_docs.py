"""The manual in docs/ builds as a site with no broken link or anchor, and the front pages'
links into it (README.md, deploy/README.md, bench/README.md) lead somewhere real."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.conftest import require

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
FRONT_PAGES = [
    REPO_ROOT / "README.md",
    REPO_ROOT / "deploy" / "README.md",
    REPO_ROOT / "bench" / "README.md",
]

#: A Markdown inline link's target (images too), outside code spans and fenced blocks.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(
        importlib.util.find_spec("mkdocs") is not None,
        "mkdocs is not installed (uv sync --group docs)",
    )
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(REPO_ROOT / "mkdocs.yml"),
            "--site-dir",
            str(out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"mkdocs build --strict failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    return out


def _page_html(site: Path, page: Path) -> Path:
    rel = page.relative_to(DOCS).with_suffix("")
    return site / "index.html" if rel.name == "index" else site / rel / "index.html"


def test_docs_build_strict_with_every_page(site: Path) -> None:
    pages = sorted(DOCS.rglob("*.md"))
    assert pages, "docs/ holds the manual"
    for page in pages:
        assert _page_html(site, page).is_file(), f"{page.relative_to(REPO_ROOT)} was not built"


def _links(markdown: str) -> list[str]:
    links, fenced = [], False
    for line in markdown.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            links += LINK.findall(re.sub(r"`[^`]*`", "", line))
    return links


def _slugs(markdown: str) -> set[str]:
    """GitHub's heading anchors for a Markdown file outside docs/ (lower case, punctuation dropped,
    blanks as dashes)."""
    slugs, fenced = set(), False
    for line in markdown.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*$", line)):
            slugs.add(re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-"))
    return slugs


@pytest.mark.parametrize("front", FRONT_PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_front_page_links_resolve(front: Path, site: Path) -> None:
    broken = []
    for link in _links(front.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (front.parent / unquote(path)).resolve() if path else front
        if not target.exists():
            broken.append(f"{link}: no such file")
            continue
        if not anchor:
            continue
        if target.is_relative_to(DOCS) and target.suffix == ".md":
            if f'id="{anchor}"' not in _page_html(site, target).read_text():
                broken.append(f"{link}: no such anchor in the built page")
        elif target.suffix == ".md" and anchor not in _slugs(target.read_text()):
            broken.append(f"{link}: no such heading")
    assert not broken, f"{front.relative_to(REPO_ROOT)}: broken links: {broken}"
