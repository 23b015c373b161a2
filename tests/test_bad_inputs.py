"""Bad input and bad config, one table: each case ends the command with exit code 2 and one message
that names the file, field or line and the fix; no traceback, and nothing already written is lost.

The cases run the same code as the console scripts (``train`` inside ``user_errors_are_messages``);
the last ones go through ``sesame-train`` itself, where Hydra's own errors name the bad key.
"""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.runs.runner import train
from tests import preloaded_commands as preloaded

SQUAD_OK = {"version": "1.1", "data": [{"title": "T", "paragraphs": [{"context": "Paris is in France.", "qas": [
    {"id": "q1", "question": "Where is Paris?", "answers": [{"text": "France", "answer_start": 12}]}]}]}]}


def _squad(mutate):
    data = json.loads(json.dumps(SQUAD_OK))
    mutate(data["data"][0]["paragraphs"][0])
    return json.dumps(data)


STSB = "index\tsentence1\tsentence2\tscore\n0\ta man\ta woman\t{}\n"


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# (case id, file name, file content or None, overrides ({f} = the file), words the message must hold)
CASES = [
    ("tsv-short-row", "bad.tsv", "sentence\tlabel\ngood film\n", ["data.train_file={f}"], ["bad.tsv:2", "tab-separated"]),
    ("tsv-unknown-label", "bad.tsv", "sentence\tlabel\ngood\tpositive\n", ["data.train_file={f}"], ["bad.tsv:2", "unknown label 'positive'"]),
    ("tsv-missing-column", "bad.tsv", "text\tlabel\ngood\t1\n", ["data.train_file={f}"], ["bad.tsv", "'sentence'", "data.task_name"]),
    ("tsv-empty-file", "bad.tsv", "", ["data.train_file={f}"], ["bad.tsv", "empty"]),
    ("data-file-missing", None, None, ["data.train_file=/no/such/train.tsv"], ["/no/such/train.tsv", "no such file"]),
    ("stsb-non-numeric", "bad.tsv", "index\tsentence1\tsentence2\tscore\n0\ta\tb\thigh\n", ["data=stsb", "data.train_file={f}"], ["bad.tsv:2", "not a number"]),
    ("table-missing-column", "bad.csv", "review,stars\ngood,5\n", ["task=text_classification", "data.train_file={f}", "data.validation_file={f}"], ["bad.csv", "data.text_column"]),
    ("squad-malformed-json", "bad.json", '{"data": [', ["task=squad_v1", "data.train_file={f}"], ["bad.json"]),
    ("squad-missing-question", "bad.json", _squad(lambda p: p["qas"][0].pop("question")), ["task=squad_v1", "data.train_file={f}"], ["bad.json", "q1", "question"]),
    ("squad-misaligned-answer", "bad.json", _squad(lambda p: p["qas"][0]["answers"][0].update(answer_start=3)), ["task=squad_v1", "data.train_file={f}"], ["bad.json", "q1", "answer_start"]),
    ("squad-empty-context", "bad.json", _squad(lambda p: p.update(context="")), ["task=squad_v1", "data.train_file={f}"], ["bad.json", "context"]),
    ("conll-missing-tag", "bad.conll", "EU\tB-ORG\nrejects\n", ["task=ner", "data.train_file={f}"], ["bad.conll", "2"]),
    ("conll-unknown-dev-tag", "dev.conll", "EU\tB-WEAPON\n", ["task=ner", "data.validation_file={f}"], ["dev.conll", "B-WEAPON"]),
    ("model-path-missing", None, None, ["encoder.name_or_path=/no/such/model"], ["/no/such/model", "no such folder"]),
    ("concat-last-4-on-2-layers", None, None, ["fusion=concat_last_4", "encoder.name_or_path={tiny2}"], ["fusion", "embeddings + 2 layers"]),
    ("cache-without-frozen", None, None, ["finetune=full", "cache.enabled=true"], ["cache.enabled", "finetune=frozen"]),
    ("cache-unknown-layers", None, None, ["finetune=frozen", "cache.enabled=true", "cache.layers=last"], ["cache.layers='last'", "fusion", "all"]),
    ("top-k-too-large", None, None, ["finetune=top_k", "finetune.top_k=9"], ["finetune.top_k=9", "4 layers"]),
    ("resume-without-checkpoint", None, None, ["resume=true"], ["resume=True", "last.ckpt"]),
    ("stsb-nan-train", "bad.tsv", STSB.format("nan"), ["data=stsb", "data.train_file={f}", "data.validation_file={f}"], ["bad.tsv:2", "'nan'", "not a finite number"]),
    ("stsb-inf-dev", "dev.tsv", STSB.format("inf"), ["data=stsb", "data.train_file={ok_stsb}", "data.validation_file={f}"], ["dev.tsv:2", "'inf'", "not a finite number"]),
    ("stsb-out-of-range", "bad.tsv", STSB.format("7.5"), ["data=stsb", "data.train_file={f}", "data.validation_file={f}"], ["bad.tsv:2", "7.5", "range 0-5"]),
    ("data-path-is-a-directory", None, None, ["data.train_file={tmp}"], ["is a directory", "data.train_file"]),
    ("model-without-tokenizer", None, None, ["encoder.name_or_path={no_tokenizer}"], ["no tokenizer files", "encoder.name_or_path", "save_pretrained"]),
    ("tokenizer-of-another-model", None, None, ["encoder.tokenizer=minilm_l6"], ["30522 tokens", "do not belong together"]),
    ("negative-learning-rate", None, None, ["finetune.head_lr=-0.001"], ["finetune.head_lr=-0.001", "positive"]),
    ("zero-encoder-lr-full", None, None, ["finetune=full", "finetune.encoder_lr=0"], ["finetune.encoder_lr=0.0", "positive"]),
    ("zero-epochs", None, None, ["trainer.max_epochs=0"], ["trainer.max_epochs=0", "sesame-eval"]),
    ("zero-batch-size", None, None, ["data.batch_size=0"], ["data.batch_size=0"]),
    ("lightning-sampler-wrapper", None, None, ["+trainer.use_distributed_sampler=true"], ["trainer.use_distributed_sampler", "shard themselves", "drop"]),
    ("glue-max-length-above-positions", None, None, ["data.max_seq_length=1000"], ["data.max_seq_length=1000", "512 positions"]),
    ("glue-task-name-typo", None, None, ["data.task_name=sst-2"], ["data.task_name='sst-2'", "not a GLUE task"]),
    ("unknown-setting", None, None, ["+finetune.lr=0.1"], ["finetune.lr", "unknown setting"]),
    ("run-folder-in-use", None, None, ["+lock=alive"], ["in use by another run", "hydra.run.dir"]),
    ("validation-interval-beyond-an-epoch", None, None, ["trainer.val_check_interval=20", "data.max_train_examples=32"],
     ["trainer.val_check_interval=20", "1 training batches", "check_val_every_n_epoch=null"]),
    ("trainer-key-typo", None, None, ["+trainer.max_epoch=1"], ["trainer.max_epoch is not", "did you mean trainer.max_epochs?"]),
    ("max-length-below-special-tokens", None, None, ["data.max_seq_length=1"], ["data.max_seq_length=1", "2 special tokens", ">= 3"]),
    ("pair-max-length-below-special-tokens", None, None, ["data=rte", "data.train_file={rte}", "data.validation_file=null",
                                                           "data.max_seq_length=4"], ["data.max_seq_length=4", "sentence pair", ">= 5"]),
]


@pytest.fixture(scope="module")
def tiny2(tmp_path_factory):
    from tests.conftest import build_tiny_bert

    return build_tiny_bert(tmp_path_factory.mktemp("tiny2"), num_layers=2)


@pytest.fixture(scope="module")
def no_tokenizer(tiny_bert_dir, tmp_path_factory):
    """The tiny model's config and weights without its tokenizer files."""
    folder = tmp_path_factory.mktemp("no_tokenizer")
    for f in tiny_bert_dir.iterdir():
        if f.name in ("config.json", "model.safetensors"):
            shutil.copy(f, folder / f.name)
    return folder


@pytest.mark.parametrize("case, name, content, overrides, words", CASES, ids=[c[0] for c in CASES])
def test_user_errors_are_one_clear_message(make_cfg, tmp_path, capsys, tiny2, no_tokenizer, case, name, content, overrides, words):
    path = _write(tmp_path, name, content) if name else None
    ok_stsb = _write(tmp_path, "ok.tsv", STSB.format("3.2"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("kept")  # the user's own file in the run folder: must survive
    if "+lock=alive" in overrides:  # a live process (this one) holds the folder
        overrides = [o for o in overrides if o != "+lock=alive"]
        (run_dir / ".sesame.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    rte = _write(tmp_path, "rte.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA man sleeps.\tA man rests.\tentailment\n")
    cfg = make_cfg(*[o.format(f=path, tiny2=tiny2, tmp=tmp_path, ok_stsb=ok_stsb, no_tokenizer=no_tokenizer, rte=rte)
                     for o in overrides])
    with pytest.raises(SystemExit) as stop, user_errors_are_messages():
        train(RunSettings.from_config(cfg), run_dir)
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert "error: " in err and "Traceback" not in err
    for word in words:
        assert word in err, f"{case}: {word!r} not in {err!r}"
    assert (run_dir / "notes.txt").read_text() == "kept"


@pytest.mark.parametrize("preset, relative, key", [("rte", "rte/train.tsv", "train_file"),
                                                  ("squad_v2", "squad_v2.0/dev-v2.0.first5articles.json", "validation_file")])
def test_a_full_data_preset_without_its_files_names_sesame_data_dir(make_cfg, tmp_path, capsys, monkeypatch, preset,
                                                                      relative, key):
    """A fresh clone has no data folder: the message says where the preset looked, through which
    setting, and where the layout is documented."""
    empty = tmp_path / "data"
    empty.mkdir()
    monkeypatch.setenv("SESAME_DATA_DIR", str(empty))
    task = "squad_v2" if preset.startswith("squad") else "glue"
    with pytest.raises(SystemExit) as stop, user_errors_are_messages():
        train(RunSettings.from_config(make_cfg(f"task={task}", f"data={preset}")), tmp_path / "run")
    err = capsys.readouterr().err
    assert stop.value.code == 2
    for words in (f"{empty / relative}: no such file (data.{key}", f"$SESAME_DATA_DIR (set to {empty})",
                  f"Fix: put {relative} there", f"SESAME_DATA_DIR to the folder that holds {relative.split('/')[0]}/",
                  "docs/configuration.md, section 'Data'", f"or set data.{key} to your copy"):
        assert words in err, f"{words!r} not in {err!r}"

    monkeypatch.delenv("SESAME_DATA_DIR")  # the default folder, relative to where the command runs
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit), user_errors_are_messages():
        train(RunSettings.from_config(make_cfg(f"task={task}", f"data={preset}")), tmp_path / "run2")
    assert f"$SESAME_DATA_DIR (not set: the default ../shared/data, from {tmp_path})" in capsys.readouterr().err


@pytest.mark.parametrize(
    "override, words",
    [("fusion=penultimate", ["fusion", "penultimate"]), ("trainer.max_epoch=3", ["max_epoch"]), ("finetune.lr=1", ["lr"])],
)
def test_bad_config_keys_are_named_by_hydra(tmp_path, override, words):
    out = preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", override, f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True,
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    for word in words:
        assert word in out.stderr


def test_sesame_eval_without_a_model_names_the_key(make_cfg, tmp_path, capsys):
    from sesame.tasks.runs.evaluation import evaluate

    with pytest.raises(SystemExit) as stop, user_errors_are_messages():
        evaluate(RunSettings.from_config(make_cfg()), tmp_path / "eval")
    assert stop.value.code == 2 and "model=" in capsys.readouterr().err


def test_a_stale_lock_of_a_killed_run_is_taken_over(make_cfg, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (run_dir / ".sesame.lock").write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    train(RunSettings.from_config(make_cfg("data.max_train_examples=8", "data.max_eval_examples=8")), run_dir)
    assert (run_dir / "metrics.json").is_file() and not (run_dir / ".sesame.lock").exists()


def test_a_bug_is_not_reported_as_a_user_error(capsys):
    with pytest.raises(SystemExit) as stop, user_errors_are_messages():
        {}["a key sesame forgot"]  # a KeyError inside sesame is a bug, not bad input
    err = capsys.readouterr().err
    assert stop.value.code == 1
    assert "Traceback" in err and "please report it" in err and "error: " not in err.splitlines()[0]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_full_disk_outside_sesames_atomic_writes_is_one_line(capsys, code):
    # e.g. Lightning's CSV logger or the feature cache writing on their own: the environment, not a bug
    with pytest.raises(SystemExit) as stop, user_errors_are_messages():
        raise OSError(code, os.strerror(code), "/runs/x/logs/metrics.csv")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert err.startswith("error: cannot write /runs/x/logs/metrics.csv: ") and "Fix:" in err


def test_a_command_that_fails_before_writing_leaves_no_folder_and_a_run_folder_is_kept(tiny_bert_dir, tmp_path):
    # Every refused or failed run used to leave an empty outputs/<task>/<time>/ (sometimes with an empty train.log)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = [f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug", "data.max_train_examples=8", "data.max_eval_examples=8"]
    new = tmp_path / "outputs" / "glue" / "now"
    bad = preloaded.run([sys.executable, "-m", "sesame.tasks.cli.train", *base, "data.batch_size=0",
                          f"hydra.run.dir={new}"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "data.batch_size=0" in bad.stderr, bad.stderr[-2000:]
    assert not new.exists() and (tmp_path / "outputs" / "glue").is_dir()  # only the folder Hydra made for the job
    # a refused rerun into a folder that holds a run changes nothing there
    run = tmp_path / "run"
    ok = preloaded.run([sys.executable, "-m", "sesame.tasks.cli.train", *base, f"hydra.run.dir={run}"],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "Loading weights" not in ok.stderr  # transformers' own progress bar for a sub-second load: off
    again = preloaded.run([sys.executable, "-m", "sesame.tasks.cli.train", *base, "data.batch_size=0",
                            f"hydra.run.dir={run}"], capture_output=True, text=True, env=env)
    assert again.returncode == 2 and (run / "metrics.json").is_file() and (run / "checkpoints" / "best.ckpt").is_file()
    evaluated = tmp_path / "eval"
    failed_eval = preloaded.run([sys.executable, "-m", "sesame.tasks.cli.eval", f"model={tmp_path / 'no-such-run'}",
                                  f"hydra.run.dir={evaluated}"], capture_output=True, text=True, env=env)
    assert failed_eval.returncode == 2 and not evaluated.exists(), failed_eval.stderr[-2000:]
