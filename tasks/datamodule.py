"""What every task's data module shares: named splits and one loader recipe for them."""

from __future__ import annotations

import lightning as L
from torch.utils.data import DataLoader


class SplitDataModule(L.LightningDataModule):
    """A data module whose splits are ``train``, ``validation`` and ``test``.

    Subclasses implement ``_loader(split, train)`` (usually with
    :func:`sesame.tasks.batching.make_loader`) and ``has_split(split)``. ``resume_at`` is set by
    :class:`sesame.tasks.checkpointing.TrainingResumeCallback` when a run resumes mid-epoch.
    """

    resume_at: tuple[int, int] | None = None

    def _loader(self, split: str, train: bool) -> DataLoader:
        raise NotImplementedError

    def has_split(self, split: str) -> bool:
        raise NotImplementedError

    def train_dataloader(self) -> DataLoader:
        loader = self._loader("train", train=True)
        self.resume_at = None  # only the first loader after a resume skips what was done
        return loader

    def val_dataloader(self) -> DataLoader:
        return self._loader("validation", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)
