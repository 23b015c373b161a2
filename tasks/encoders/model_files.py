"""What a model folder's files can refuse to load as, told as the user's problem, not a bug: a config naming a model
type this transformers does not know, a config that needs the folder's own Python code (``auto_map``; sesame never
runs it), and pickled weights (``pytorch_model.bin``) that name a code global, refused by torch's weights-only
unpickler. No code from the folder runs in any of these cases."""

from __future__ import annotations

import contextlib
import pickle
import re
from collections.abc import Iterator

from sesame.tasks.core.errors import ConfigError, DataError, refused_global


class UnsafeModelFileError(DataError):
    """Model weights that would run code when loaded: refused, and nothing in them runs."""


@contextlib.contextmanager
def model_folder_errors(path: str, key: str = "encoder.name_or_path") -> Iterator[None]:
    """Turn transformers' and torch's refusals of the files in ``path`` (named by setting ``key``) into one-line
    errors that say what is wrong with the folder and how to fix it."""
    try:
        yield
    except pickle.UnpicklingError as err:
        what = refused_global(err) or "a pickled object"
        raise UnsafeModelFileError(
            f"{key}={path}: its weights were refused: loading them would run code ({what}), and sesame reads weights "
            "as data only. Fix: use model.safetensors weights, or "
            "re-save the weights of a model you trust with save_pretrained (safetensors)"
        ) from None
    except ValueError as err:
        text = str(err)
        if "trust_remote_code" in text or "custom code" in text:
            raise ConfigError(
                f"{key}={path}: its config.json needs the folder's own Python code (auto_map), which sesame never "
                "runs. Fix: use a model whose architecture transformers ships (a BERT, RoBERTa, ELECTRA, ... folder), "
                "or convert this one to such an architecture"
            ) from None
        unknown = re.search(r"model type `([^`]*)`", text)
        if unknown and "does not recognize" in text:
            raise ConfigError(
                f"{key}={path}: its config.json names model type {unknown.group(1)!r}, which this transformers does not "
                "know. Fix: correct model_type in that config.json, or install a transformers that has the "
                "architecture"
            ) from None
        raise
