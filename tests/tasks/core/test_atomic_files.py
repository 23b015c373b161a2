import errno
import os

import pytest
import torch

from sesame.tasks.core.atomic_files import atomic_open, torch_save_atomic, write_json_atomic
from sesame.tasks.runs.checkpoint_callbacks import AtomicCheckpointIO
from sesame.tasks.core.errors import UserError, WriteError


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
    assert torch.equal(torch.load(tmp_path / "c" / "last.ckpt", weights_only=True)["state_dict"]["w"], torch.ones(2))
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["last.ckpt"]


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left"), (errno.EDQUOT, "quota"),
                                         (errno.EROFS, "read-only"), (errno.EACCES, "permission denied")])
def test_a_refused_write_names_the_file_and_keeps_the_previous_one(tmp_path, code, words):
    path = write_json_atomic(tmp_path / "metrics.json", {"f1": 1.0})
    with pytest.raises(WriteError) as info:
        with atomic_open(path):
            raise OSError(code, os.strerror(code))  # what handle.write raises on a full disk
    message = str(info.value)
    assert isinstance(info.value, UserError)
    assert f"cannot write {path}: " in message and words in message and "previous metrics.json is intact" in message and "Fix:" in message
    assert path.read_text() == '{\n  "f1": 1.0\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # the temporary file is gone


def test_a_full_disk_at_fsync_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = torch_save_atomic({"w": torch.ones(2)}, tmp_path / "last.ckpt")
    before = path.read_bytes()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(WriteError, match="previous last.ckpt is intact"):
        torch_save_atomic({"w": torch.zeros(2)}, path)
    with pytest.raises(WriteError, match=f"cannot write {tmp_path / 'new.ckpt'}: .*Nothing was written"):
        torch_save_atomic({"w": torch.zeros(2)}, tmp_path / "new.ckpt")
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_file_where_a_folder_should_be_is_named(tmp_path):
    (tmp_path / "some_file").write_text("mine")
    for target in (tmp_path / "some_file" / "x.json", tmp_path / "some_file" / "deeper" / "x.json"):
        with pytest.raises(WriteError, match=f"{tmp_path / 'some_file'} is a file, not a folder"):
            write_json_atomic(target, {})
    assert (tmp_path / "some_file").read_text() == "mine"


def test_other_os_errors_stay_bugs(tmp_path):
    with pytest.raises(OSError) as info:
        with atomic_open(tmp_path / "x.json"):
            raise OSError(errno.EBADF, "Bad file descriptor")  # sesame's mistake, not the user's
    assert not isinstance(info.value, UserError) and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where no folder can be created")
def test_an_output_folder_that_cannot_be_created_is_named_with_exit_2(tmp_path, capsys):
    # sesame-predict -o /proc/nope/out.jsonl and sesame-export ... /proc/nope/out ended in "internal error"
    from sesame.tasks.cli.errors import user_errors_are_messages
    from sesame.tasks.export import staged_folder

    for write in (lambda: write_json_atomic("/proc/nope/out.jsonl", {}),
                  lambda: staged_folder("/proc/nope/out").__enter__()):
        with pytest.raises(SystemExit) as ended, user_errors_are_messages():
            write()
        assert ended.value.code == 2
        err = capsys.readouterr().err
        assert "error: cannot write /proc/nope/out" in err and "the folder /proc/nope cannot be created" in err
        assert "Traceback" not in err and "internal error" not in err
    # a missing file read inside the write is still a bug, not blamed on the output's folder
    with pytest.raises(FileNotFoundError) as info:
        with atomic_open(tmp_path / "x.json"):
            open(tmp_path / "not-there.txt")
    assert not isinstance(info.value, UserError)


def test_a_disk_that_fills_inside_torch_save_is_a_write_error_not_torchs_unexpected_pos(tmp_path, monkeypatch):
    # A 2 MB tmpfs at the first checkpoint: the write(2) fails inside torch's zip writer, which raises
    # "RuntimeError: [enforce fail at inline_container.cc] unexpected pos ..." and drops the OSError
    import io

    path = torch_save_atomic({"w": torch.ones(2)}, tmp_path / "last.ckpt")
    before = path.read_bytes()
    real_fdopen = os.fdopen

    class FillsUp(io.BufferedWriter):
        written = 0

        def write(self, data):
            FillsUp.written += len(data)
            if FillsUp.written > 4096:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(data)

    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", **kw: FillsUp(real_fdopen(fd, "wb", buffering=0))
                        if "b" in mode else real_fdopen(fd, mode, **kw))
    with pytest.raises(WriteError, match="no space left on the device.*previous last.ckpt is intact"):
        torch_save_atomic({"w": torch.zeros(100_000)}, path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
    # any other failure inside torch.save stays what it was
    monkeypatch.undo()
    with pytest.raises(Exception) as other:
        torch_save_atomic({"w": lambda: 0}, tmp_path / "x.ckpt")
    assert not isinstance(other.value, UserError)
