"""A section of a Markdown page (README.md or a page of the documentation site under docs/) generated from
committed results: the text between two HTML-comment markers.

Used by the generators of the result tables (``tests/families/table.py``, ``benchmarks/full_data_study.py
--readme``, ``benchmarks/compression_report.py``), whose tests check that each page holds exactly what the
committed results render. A generator names its page and markers once, as constants; links it writes are
relative to that page (``link``), so the same text renders on GitHub and on the site."""

from __future__ import annotations

import os
from pathlib import Path


def section_in(readme: str, begin: str, end: str) -> str | None:
    """The text between the markers (without the newlines next to them), or None without them."""
    if begin not in readme or end not in readme:
        return None
    return readme.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def with_section(readme: str, begin: str, end: str, body: str, heading: str) -> str:
    """``readme`` with the text between the markers replaced by ``body``; without the markers, a new
    ``## heading`` section holding them is appended."""
    marked = f"{begin}\n{body}\n{end}"
    if begin in readme and end in readme:
        head, rest = readme.split(begin, 1)
        return head + marked + rest.split(end, 1)[1]
    return readme.rstrip("\n") + f"\n\n## {heading}\n\n" + marked + "\n"


def link(target: Path, page: Path) -> str:
    """``target``'s path relative to the folder of ``page`` (both in the repository), with forward slashes: what a
    Markdown link on ``page`` names."""
    return Path(os.path.relpath(target, page.parent)).as_posix()
