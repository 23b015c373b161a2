"""The documentation site (``mkdocs.yml``, ``docs/``) builds with ``--strict``, so a broken link, anchor, page left
out of the navigation or unresolved API reference fails the suite; its API pages cover every package; and its
pages speak to a user: no project history, no dates of studies, no folders of the machine that measured.

The commands on the site's pages are checked with the README's, by ``tests/test_readme_commands.py`` (which
reads ``PAGES``: the README and every ``docs/*.md``); the last test here makes sure it reads every page that
shows one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import test_readme_commands as commands
from tests.conftest import require

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
RESULTS = DOCS / "results"
#: Pages written for a reader: the README, and the site's pages but the generated reports under docs/results/.
AUTHORED = [REPO / "README.md", *sorted(p for p in DOCS.rglob("*.md") if RESULTS not in p.parents)]
#: Words that tell how the project was made rather than how to use it, and dates of its studies.
HISTORY = {
    "an issue": re.compile(r"\bissues?\b", re.IGNORECASE),
    "a session (other than onnxruntime's)": re.compile(r"(?<!onnxruntime )\bsessions?\b", re.IGNORECASE),
    "a wave": re.compile(r"\bwaves?\b", re.IGNORECASE),
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
}
#: Folders of a machine, which a reader does not have (examples use /data, /models, outputs/, ...).
MACHINE_PATH = re.compile(r"(?<![\w.$~])/(?:work|root|home|Users|scratch)/")


def test_the_site_builds_strict(tmp_path):
    require("mkdocs")
    require("mkdocstrings")
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(site)],
                         cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    # every page of the navigation was written, and the API pages hold the docstrings
    assert (site / "index.html").is_file() and (site / "results" / "index.html").is_file()
    api = (site / "api" / "heads" / "index.html").read_text(encoding="utf-8")
    assert "sesame.heads.pooling.MeanPooling" in api


def test_every_package_has_its_api_page():
    """Each package of ``heads/`` and ``tasks/`` is rendered (``::: sesame.<package>``, with its submodules) on a
    page of ``docs/api/``; a new task package needs a line in ``docs/api/tasks.md``."""
    rendered = {m for page in (DOCS / "api").glob("*.md")
                for m in re.findall(r"^::: (sesame(?:\.\w+)+)\s*$", page.read_text(encoding="utf-8"), re.MULTILINE)}
    packages = {"sesame.heads"} | {f"sesame.tasks.{p.parent.name}" for p in (REPO / "tasks").glob("*/__init__.py")}
    assert packages - rendered == set(), "no page of docs/api/ renders these packages"
    assert rendered - packages == set(), "docs/api/ renders what is no package"


@pytest.mark.parametrize("page", AUTHORED, ids=[p.relative_to(REPO).as_posix() for p in AUTHORED])
def test_a_page_speaks_to_a_user(page):
    text = page.read_text(encoding="utf-8")
    for what, pattern in HISTORY.items():
        found = [m.group(0) for m in pattern.finditer(text)]
        assert not found, f"{page.relative_to(REPO)} speaks of {what}: {found[:5]}"
    assert not MACHINE_PATH.findall(text), f"{page.relative_to(REPO)} names a folder of a machine"


def test_no_report_names_a_folder_of_the_machine_that_measured():
    """The reports under docs/results/ keep when they were written, but a command in them names folders a reader
    has (``$SESAME_STUDY_DIR``, ``outputs/...``)."""
    found = {p.relative_to(REPO).as_posix(): MACHINE_PATH.findall(p.read_text(encoding="utf-8"))
             for p in RESULTS.rglob("*.md")}
    assert {page: paths for page, paths in found.items() if paths} == {}


def test_the_command_check_reads_every_page_that_shows_a_command():
    shown = {p for p in (REPO / "README.md", *DOCS.rglob("*.md")) if RESULTS not in p.parents
             and "```bash" in p.read_text(encoding="utf-8")}
    assert shown <= set(commands.PAGES), f"tests/test_readme_commands.py does not read {sorted(shown - set(commands.PAGES))}"
