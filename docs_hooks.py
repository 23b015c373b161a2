"""mkdocs hook (``hooks:`` in mkdocs.yml): lets mkdocstrings read sesame's modules under their installed names.

setup.py installs the repository's ``heads/`` and ``tasks/`` as ``sesame.heads`` and ``sesame.tasks``; griffe, which
mkdocstrings reads the source with, finds modules by folder, and the repository has no ``sesame/`` folder. This
hook makes one under ``build/docs_api/`` (ignored by git) holding links to the two folders, which mkdocs.yml names
in the handler's ``paths``. Nothing is imported: the docstrings are read from the files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parent
API_SOURCE = ROOT / "build" / "docs_api"
PACKAGES = ("heads", "tasks")


def source_tree(root: Path = ROOT, target: Path = API_SOURCE) -> Path:
    """``target/sesame/<package>`` for each of PACKAGES: a link to ``root/<package>`` (a copy where the file
    system has no links). Returns ``target``."""
    sesame = target / "sesame"
    sesame.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        place, real = sesame / package, root / package
        if place.is_symlink() and place.resolve() == real.resolve():
            continue
        if place.is_symlink() or place.is_file():
            place.unlink()
        elif place.is_dir():
            shutil.rmtree(place)
        try:
            place.symlink_to(os.path.relpath(real, sesame), target_is_directory=True)
        except OSError:
            shutil.copytree(real, place, ignore=shutil.ignore_patterns("__pycache__"))
    return target


@event_priority(100)  # before mkdocstrings reads its handler's paths
def on_config(config):
    source_tree()
    return config
