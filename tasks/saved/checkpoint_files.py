"""Reading a checkpoint file as data, never as code.

A ``.ckpt`` is a pickle; an ordinary unpickler runs whatever a ``__reduce__`` in it names, so a shared
run folder could run code on whoever evaluates it. Every checkpoint sesame reads (``sesame-eval``,
``-predict``, ``-export``, ``-compress``, ``distill.teacher=``, resuming, and Lightning's own loads
through :class:`~sesame.tasks.runs.checkpoint_callbacks.AtomicCheckpointIO`) goes through
:func:`load_checkpoint_file`, which uses torch's weights-only unpickler: tensors (quantised ones
included), containers and plain Python values, which is all a sesame checkpoint holds.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from sesame.tasks.core.errors import DataError, refused_global
from sesame.tasks.core.known_noise import known_noise_silenced



class UnsafeCheckpointError(DataError):
    """A checkpoint that would run code when loaded: refused, and nothing in it runs."""


class DamagedCheckpointError(DataError):
    """A checkpoint file that is truncated, empty or not a PyTorch checkpoint at all."""


#: What a checkpoint needs beyond the weights to continue its run: Lightning's optimiser and loop state. best.ckpt
#: (``save_weights_only``) has neither.
RESUME_STATE = ("optimizer_states", "loops")


def holds_resume_state(path: str | Path) -> bool:
    """Whether checkpoint ``path`` can resume a run (holds ``RESUME_STATE``), read with the weights-only unpickler and
    its tensors memory-mapped, not loaded. A damaged or unsafe file raises as :func:`load_checkpoint_file` says."""
    return all(key in load_checkpoint_file(path, mmap=True) for key in RESUME_STATE)


@known_noise_silenced()
def load_checkpoint_file(path: str | Path, map_location: Any = "cpu", mmap: bool = False) -> dict[str, Any]:
    """The contents of checkpoint ``path`` (on the CPU unless ``map_location`` says otherwise), read
    with the weights-only unpickler.

    Raises :class:`UnsafeCheckpointError` for a file that names anything beyond tensors and plain
    values (its payload never runs), :class:`DamagedCheckpointError` for one that cannot be read.
    """
    path = Path(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        # The weights-only unpickler refuses every global that is not an allowed data type (how a pickle
        # reaches code); any other refusal is a file that is no pickle sesame wrote.
        found = refused_global(err)
        if not found:
            raise _damaged(path, err) from None
        raise UnsafeCheckpointError(
            f"{path} was refused: loading it would run code ({found}), "
            "and sesame reads checkpoints as data only (tensors and plain values, which is all sesame writes). "
            "Fix: use a checkpoint written by sesame; if this file is your own and trusted, load it yourself and "
            "re-save its state_dict and hyper_parameters as plain data"
        ) from None
    except (RuntimeError, EOFError, KeyError, ValueError, IndexError, AttributeError, TypeError) as err:
        raise _damaged(path, err) from None
    except OSError as err:
        if isinstance(err, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise  # the file is not there to read: not a damaged one
        # torch's zip reader: "Invalid argument" for some truncated archives
        raise _damaged(path, err) from None


def _damaged(path: Path, err: BaseException) -> DamagedCheckpointError:
    reason = "unreadable pickle data" if isinstance(err, pickle.UnpicklingError) else str(err).split(". ")[0] or "no data"
    return DamagedCheckpointError(
        f"{path} is damaged: it is truncated, empty or not a PyTorch checkpoint ({type(err).__name__}: {reason}). "
        "Fix: use the run's other checkpoint or an earlier copy (to continue a run: resume=<run>/checkpoints/last.ckpt; "
        "best.ckpt holds the weights only: init_from=<run>/checkpoints/best.ckpt starts a new run from them); "
        "sesame writes checkpoints atomically, so this one was damaged after it was written (an interrupted copy, a disk fault)"
    )
