"""sesame's Hydra sweeper for pruning Optuna searches (``hydra/sweeper=pruning_optuna``): see ``pruning_sweeper.py``."""
