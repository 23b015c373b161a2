"""Where data lives: slices shipped inside sesame, and the larger shared data folder.

Config files name them through two OmegaConf resolvers (registered in ``tasks/cli/resolvers.py``):
- ``${shipped:glue/sst2/train.tsv}``: a file in the repository's ``data/`` folder (installed as
  ``sesame.data``), so the default run works from any working directory and from a wheel;
- ``${data_dir:sst2/dev.tsv}``: a file under ``$SESAME_DATA_DIR`` (default ``../shared/data``,
  relative to the working directory), for benchmarks and long real-data runs.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


DATA_DIR_ENV = "SESAME_DATA_DIR"
DEFAULT_DATA_DIR = "../shared/data"


def shipped_path(relative: str) -> str:
    return str(Path(str(resources.files("sesame.data"))) / relative)


def data_dir_path(relative: str = "") -> str:
    root = Path(os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR)).expanduser()
    return str(root / relative) if relative else str(root)

