"""sesame's Hydra launcher for Ray (``hydra/launcher=ray``): see ``ray_launcher.py``."""
