import pytest
import torch

from sesame.tasks.atomic_files import atomic_open, write_json_atomic
from sesame.tasks.checkpoint_callbacks import AtomicCheckpointIO


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = write_json_atomic(tmp_path / "metrics.json", {"f1": 1.0})
    with pytest.raises(RuntimeError):
        with atomic_open(path) as handle:
            handle.write('{"f1": 0.')  # half a file, then the process "dies"
            raise RuntimeError("killed")
    assert path.read_text() == '{\n  "f1": 1.0\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_checkpoint_io_writes_a_loadable_file_in_one_piece(tmp_path):
    AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.ones(2)}}, tmp_path / "c" / "last.ckpt")
    assert torch.equal(torch.load(tmp_path / "c" / "last.ckpt")["state_dict"]["w"], torch.ones(2))
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["last.ckpt"]
