"""``sesame-eval``: evaluate a sesame checkpoint or a Hugging Face task model on a dataset.

    sesame-eval task=squad_v1 model=outputs/squad_v1/<run> data.validation_file=dev-v1.1.json
    sesame-eval task=glue data=sst2 model=/models/bert-sst2        # a ...ForSequenceClassification folder

Writes predictions and ``metrics.json`` into its run folder and prints that folder as its last line.
"""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sesame.tasks.cli.ddp_sweeps import adjust_argv
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.cli.resolvers import register_resolvers
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.failed_start import no_folder_left_by_a_failed_start

register_resolvers()


@hydra.main(version_base="1.3", config_path="pkg://sesame.conf", config_name="eval")
def _main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    with user_errors_are_messages(), no_folder_left_by_a_failed_start(run_dir):
        settings = RunSettings.from_config(cfg)  # read once, here; a bad setting is reported before torch loads
        from sesame.tasks.core.known_noise import library_progress_bars_off, lightning_lines_once
        from sesame.tasks.runs.evaluation import evaluate  # torch and Lightning: not for --help (see cli/train.py)

        lightning_lines_once()
        library_progress_bars_off()
        evaluate(settings, run_dir, overrides=list(hydra_cfg.overrides.task))
    print(run_dir)


def main() -> None:
    adjust_argv()  # a DDP rank > 0 logs into its own file, and follows rank 0's sweep (tasks/cli/ddp_sweeps.py)
    _main()


if __name__ == "__main__":
    main()
