"""Predictions with a trained model, whatever its task: ``Predictor.from_run(path)`` (``predictor.py``)."""

from sesame.tasks.inference.predictor import Predictor

__all__ = ["Predictor"]
