"""The documentation: the site builds in strict mode (a broken link or anchor, a page left out of the navigation fails
it), the generated reference pages are the code's, the README stays a front door whose numbers are all on a page,
and its pictures are of the current report."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from orchestrator.paths import PROJECT_ROOT

DOCS = PROJECT_ROOT / "docs"
README = PROJECT_ROOT / "README.md"


def test_the_site_builds_in_strict_mode(tmp_path):
    mkdocs = Path(sys.executable).with_name("mkdocs")
    result = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=300, env=os.environ | {"NO_MKDOCS_2_WARNING": "1"})  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "errors" / "index.html").is_file()


def test_the_generated_reference_pages_are_the_codes():
    """The bad inputs it runs start no server or cluster; the Ray address one waits its 3 s for an answer."""
    result = subprocess.run([sys.executable, str(DOCS / "gen_reference.py"), "--check"], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr


def _outside_code(text: str) -> list[str]:
    lines, code = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            code = not code
        elif not code:
            lines.append(line)
    return lines


def test_the_readme_is_a_front_door_whose_links_and_numbers_are_on_the_docs_pages():
    text = README.read_text()
    assert len(text.splitlines()) <= 220
    assert [line for line in _outside_code(text) if len(line) > 200] == []
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    for heading in ("Install", "Quick start", "One GPU node", "A cluster", "Reading results", "Documentation"):
        assert heading in headings
    assert "make demo" in text and "make test" in text and "RAY_AUTH_MODE=token" in text
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):  # every local link, anchors aside
        assert (PROJECT_ROOT / target).exists(), target
    pages = "\n".join(path.read_text() for path in DOCS.rglob("*.md"))
    numbers = set(re.findall(r"\d+\.\d+", text))
    assert numbers and sorted(number for number in numbers if number not in pages) == []


def test_the_pictures_are_small_and_of_the_current_report():
    """``make screenshots`` records what the demo's verdict map is made from; a change there retakes them."""
    record = json.loads((DOCS / "img" / "screenshots.json").read_text())
    for name in record["pictures"]:
        picture = DOCS / "img" / name
        assert picture.read_bytes()[8:12] == b"WEBP" and picture.stat().st_size < 100 * 1024
    assert f"docs/img/{record['pictures'][0]}" in README.read_text()
    changed = [name for name, digest in record["inputs"].items()
               if hashlib.sha256((PROJECT_ROOT / name).read_bytes()).hexdigest() != digest]  # fmt: skip
    assert changed == [], f"the pictures predate a change to {changed}: run `make screenshots`"
