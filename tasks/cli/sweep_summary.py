"""The end of a ``sesame-train --multirun``: the sweep's table (``sesame-report``'s ``report.md``,
``report.csv``, ``report.png``) written into the sweep folder and printed. A Hydra callback, named in
``conf/config.yaml`` (``hydra.callbacks.sweep_report``); ``'~hydra.callbacks.sweep_report'`` on the command
line turns it off.
"""

from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from sesame.tasks.core.distributed import is_main_process
from sesame.tasks.core.errors import UserError


class SweepSummary(Callback):
    """Writes and prints the sweep's table once every job has ended."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not is_main_process():  # the DDP ranks > 0 of a sweep follow rank 0's, which reports it
            return
        from sesame.tasks.runs.sweep_report import write_table_report  # only when a sweep ends

        sweep_dir = config.hydra.sweep.dir
        try:
            table, written = write_table_report(sweep_dir)
        except (UserError, OSError) as err:  # e.g. every job failed: the sweep's own errors said why
            print(f"note: no sweep summary: {err}", file=sys.stderr)
            return
        print(f"\nsweep summary ({sweep_dir}):\n{table}\nwrote {', '.join(str(p) for p in written)}")
