"""``cfg.logger``, typed: plain data (importing it loads no Lightning); a logger whose package is missing is refused here."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import ClassVar

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings

#: The package each logger besides csv needs; each is also the name of the pyproject extra that installs it.
PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}


@dataclass(frozen=True)
class LoggerSettings(Settings):
    """``cfg.logger`` (``conf/logger/<name>.yaml``)."""

    group = "logger"
    #: Which keys each logger reads besides ``name``, and which of them must be set.
    KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "csv": (), "tensorboard": (), "mlflow": ("experiment_name", "tracking_uri"), "wandb": ("project",),
    }
    REQUIRED: ClassVar[dict[str, tuple[str, ...]]] = {"mlflow": ("experiment_name",), "wandb": ("project",)}
    name: str                          # csv | tensorboard | mlflow | wandb
    experiment_name: str | None = None  # mlflow: the experiment the run is logged under
    tracking_uri: str | None = None     # mlflow: None -> file:<run>/mlruns (a local file store)
    project: str | None = None          # wandb: the project an offline run is synced to later

    def __post_init__(self) -> None:
        if self.name not in self.KEYS:
            raise ConfigError(f"logger={self.name}: unknown logger; use one of {', '.join(self.KEYS)} "
                              "(conf/logger/)")
        extra = [k for k in ("experiment_name", "tracking_uri", "project")
                 if getattr(self, k) is not None and k not in self.KEYS[self.name]]
        if extra:
            raise ConfigError(f"logger.{extra[0]} is not a setting of logger={self.name}. Fix: remove it")
        missing = [k for k in self.REQUIRED.get(self.name, ()) if not getattr(self, k)]
        if missing:
            raise ConfigError(f"logger.{missing[0]} is not set: logger={self.name} needs it (conf/logger/{self.name}.yaml)")
        check_installed(self.name)


def check_installed(name: str) -> None:
    """A ConfigError naming the extra to install when logger ``name`` needs a package that is missing."""
    package = PACKAGES.get(name)
    if package and importlib.util.find_spec(package) is None:
        raise ConfigError(f"logger={name} needs the {package} package. Fix: pip install 'sesame[{package}]' "
                          f"(or pip install {package}), or use logger=csv")
