"""The reference builds as an MkDocs site with no warning, and every page of it is in the navigation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def test_reference_builds_strictly_and_lists_every_page(tmp_path):
    config = yaml.safe_load((DOCS / "mkdocs.yml").read_text())
    in_nav = {next(iter(entry.values())) for entry in config["nav"]}
    pages = {path.relative_to(DOCS / config["docs_dir"]).as_posix() for path in (DOCS / config["docs_dir"]).rglob("*.md")}
    assert pages == in_nav, f"pages missing from the nav: {sorted(pages - in_nav)}; nav entries without a page: {sorted(in_nav - pages)}"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(DOCS / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "tuning" / "index.html").is_file()
