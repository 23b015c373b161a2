"""Package discovery for the layout the design card keeps: ``heads/``, ``tasks/``, ``conf/`` and
``data/`` at the top of the repository, installed as ``sesame.heads``, ``sesame.tasks``,
``sesame.conf`` and ``sesame.data`` (so no generic top-level name such as ``tasks`` is claimed).
Everything else about the package is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

CODE = ("heads", "tasks")  # every folder below is a package (the QA evaluate-metric scripts too)
DATA = ("conf", "data")  # one package each; their files ship as package data (pyproject.toml)

#: The Hydra plugins behind ``hydra/launcher=ray`` and ``hydra/sweeper=pruning_optuna``: Hydra finds launchers only in the ``hydra_plugins``
#: namespace package (a thin class there; the work is ``tasks/cli/ray_sweep.py``, ``tasks/cli/optuna_sweep.py``).
PLUGINS = ("hydra_plugins.sesame_ray_launcher", "hydra_plugins.sesame_optuna_sweeper")

setup(
    package_dir={**{f"sesame.{top}": top for top in CODE + DATA}, **{p: p.replace(".", "/") for p in PLUGINS}},
    packages=[
        *PLUGINS,
        *(f"sesame.{top}" for top in DATA),
        *(f"sesame.{name}" for name in find_namespace_packages(include=[p for t in CODE for p in (t, f"{t}.*")])
          if "__pycache__" not in name),
    ],
)
