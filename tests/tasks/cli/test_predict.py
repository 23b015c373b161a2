"""sesame-predict: JSON lines from stdin or a file to stdout or a file, --help with examples, one-line
errors with exit code 2 that name the input line."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sesame.tasks.cli.predict import main, parse_overrides
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.inference.predictor import Predictor
from tests.tasks.qa.conftest import CTX
from tests.tasks.inference.test_predictor import sst2_texts, trained_run


@pytest.fixture(scope="module")
def sst2_run(make_cfg, tmp_path_factory) -> Path:
    return trained_run("sst2", make_cfg, tmp_path_factory)


@pytest.fixture(scope="module")
def qa_run(make_cfg, tmp_path_factory) -> Path:
    return trained_run("squad_v1", make_cfg, tmp_path_factory)


def _exit_code(*argv: str) -> int:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
    return info.value.code


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_help_shows_an_example_for_each_task():
    out = subprocess.run([sys.executable, "-m", "sesame.tasks.cli.predict", "--help"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("usage: sesame-predict")
    for text in ('"question"', '"context"', '"text_pair"', '"tokens"', '"endings"', "--n-best", "--set head.", "stdin", "ONNX"):
        assert text in out, text
    # Each task's section comes from its own predictor module (PREDICT_HELP), found through conf/task/*.yaml.
    for conf in (Path(__file__).resolve().parents[3] / "conf" / "task").glob("*.yaml"):
        assert f"task={conf.stem}" in out or f"/ {conf.stem}" in out, f"sesame-predict --help has nothing on task={conf.stem}"
    assert "no PREDICT_HELP" not in out


def test_stdin_to_stdout(sst2_run, monkeypatch, capsys):
    texts = sst2_texts(5)
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts))))
    main([str(sst2_run), "--batch-size", "2"])
    got = _lines(capsys.readouterr().out)
    want = Predictor.from_run(sst2_run)([{"id": i, "text": t} for i, t in enumerate(texts)])
    assert [g["id"] for g in got] == list(range(5)) and [g["label"] for g in got] == [w["label"] for w in want]
    assert [g["probabilities"] for g in got] == [pytest.approx(w["probabilities"], abs=1e-5) for w in want]


def test_a_file_to_a_file_with_n_best_settings_and_a_progress_bar(qa_run, tmp_path, capsys):
    questions = [{"id": "q1", "question": "Who won the Nobel Prize?", "context": CTX},
                 {"id": "q2", "question": "When?", "context": " ".join([CTX] * 6)}]
    source = tmp_path / "questions.jsonl"
    source.write_text("\n".join(json.dumps(q) for q in questions) + "\n\n", encoding="utf-8")
    out = tmp_path / "answers.jsonl"
    main([str(qa_run), str(source), "-o", str(out), "--n-best", "4", "--set", "head.max_answer_length=2", "--progress"])
    captured = capsys.readouterr()
    assert captured.out == "" and "predicting" in captured.err and "2/2" in captured.err
    answers = _lines(out.read_text(encoding="utf-8"))
    assert [a["id"] for a in answers] == ["q1", "q2"]
    for a, q in zip(answers, questions):
        assert len(a["nbest"]) == 4 and q["context"][a["char_start"]:a["char_end"]] == a["answer"]
        assert all(len(c["text"].split()) <= 2 for c in a["nbest"])  # head.max_answer_length=2 tokens


def test_a_bad_line_exits_2_naming_it_and_writes_no_file(qa_run, tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"question": "Who?", "context": CTX}) + "\n" + '{"question": "Who?"}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert _exit_code(qa_run, source, "-o", out) == 2
    err = capsys.readouterr().err
    assert f"error: {source}, line 2: no 'context' field. Fix:" in err and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == [source]  # whole or not at all

    source.write_text("{oops\n", encoding="utf-8")
    assert _exit_code(qa_run, source) == 2
    assert f"{source}, line 1: not JSON" in capsys.readouterr().err
    source.write_bytes('{"question": "Qui?", "context": "\u00e9t\u00e9"}\n'.encode("latin-1"))
    assert _exit_code(qa_run, source) == 2
    assert f"{source}: not UTF-8 text" in capsys.readouterr().err


@pytest.fixture(scope="module")
def ner_run(make_cfg, tmp_path_factory) -> Path:
    return trained_run("ner", make_cfg, tmp_path_factory)


def test_an_empty_ner_input_exits_2_naming_the_line_and_the_field(ner_run, tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    for line, message in (('{"tokens": []}', "'tokens' is empty"), ('{"text": " "}', "'text' is empty or only white space"),
                          ('{"tokens": ["a", ""]}', "'tokens' word 2 ('') is empty")):
        source.write_text('{"text": "Marie Curie lived in Paris."}\n' + line + "\n", encoding="utf-8")
        assert _exit_code(ner_run, source) == 2
        err = capsys.readouterr().err
        assert f"error: {source}, line 2: {message}" in err and "Traceback" not in err


def test_usage_errors_are_one_line(sst2_run, tmp_path, capsys):
    assert _exit_code(sst2_run, tmp_path / "missing.jsonl") == 2
    assert "missing.jsonl" in capsys.readouterr().err
    assert _exit_code(tmp_path / "no_run") == 2
    assert "no such run folder" in capsys.readouterr().err
    assert _exit_code(sst2_run, "--n-best", "3", "-") == 2
    assert "--n-best applies to question answering models" in capsys.readouterr().err
    assert _exit_code(sst2_run, "--set", "pooling.name=mean") == 2
    assert "pooling.name cannot be overridden" in capsys.readouterr().err


def test_set_values_are_read_as_yaml():
    assert parse_overrides(["head.n_best_size=5", "head.null_score_diff_threshold=-1.5", "encoder.tokenizer=null",
                            "data.x=a=b"]) == {"head.n_best_size": 5, "head.null_score_diff_threshold": -1.5,
                                               "encoder.tokenizer": None, "data.x": "a=b"}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["n_best_size"])


def _predict_process(run: Path, *args: str, stdin: str) -> subprocess.CompletedProcess:
    """``sesame-predict RUN ARGS`` in a shell, with ``stdin`` as its input redirection (``</dev/null``, ``0<&-``)."""
    command = f'exec "$0" -m sesame.tasks.cli.predict "$@" {stdin}'
    return subprocess.run(["sh", "-c", command, sys.executable, str(run), *args], capture_output=True, text=True)


def test_closed_stdin_is_a_clear_error_and_empty_stdin_an_empty_output(sst2_run):
    closed = _predict_process(sst2_run, stdin="0<&-")
    assert closed.returncode == 2 and "Traceback" not in closed.stderr
    assert "error: INPUT -: standard input is closed" in closed.stderr and "Fix:" in closed.stderr
    empty = _predict_process(sst2_run, stdin="</dev/null")
    assert empty.returncode == 0 and empty.stdout == "" and "no input lines in <stdin>" in empty.stderr


def test_output_into_new_folders_makes_them_and_under_a_file_is_a_clear_error(sst2_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"text": "a fine film"}\n'))
    main([str(sst2_run), "-o", str(tmp_path / "new" / "folders" / "out.jsonl")])  # as mkdir -p: a user expects the file
    assert list(_lines((tmp_path / "new" / "folders" / "out.jsonl").read_text()))[0]["label"] in ("0", "1")
    (tmp_path / "some_file").write_text("mine")
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"text": "a fine film"}\n'))
    assert _exit_code(sst2_run, "-o", tmp_path / "some_file" / "out.jsonl") == 2
    assert f"{tmp_path / 'some_file'} is a file, not a folder" in capsys.readouterr().err
    assert (tmp_path / "some_file").read_text() == "mine"
