"""What is fuzzed, shared by the fuzz tests (``tests/test_fuzz_readers.py``, ``tests/test_fuzz_inputs.py``)
and the fuzz benchmark (``benchmarks/fuzz_readers.py``): for every reader of user input, a hypothesis
strategy of inputs and a check that says how the input ended.

Each check returns :data:`READ` (the input was read, and what came out is right: the invariants below
hold) or :data:`REFUSED` (a :class:`UserError`, or exit 2 for ``sesame-score``, whose one-line message
names the file, the line and the field, or the setting); anything else it raises is an internal error.

- data files (GLUE TSV, tables, CoNLL, NER JSON lines, SQuAD JSON, SWAG CSV / JSON lines): a real file of
  the format (a few lines of a shipped slice) after random edits (:func:`mutated`);
- ``sesame-predict`` input of every task: JSON lines of records whose fields are right, missing, of another
  JSON type, or random Unicode text (combining marks, emoji, right-to-left and CJK text, invisible
  characters), with an ``id`` of any JSON value, sometimes edited character by character. Read as the
  command reads it (the file's lines); checked: one output per non-blank input line, in order (ids copied),
  every output writable as strict JSON, a QA answer equal to ``context[char_start:char_end]``, an NER entity
  starting and ending at word boundaries of the input's words;
- ``sesame-score``: predictions and gold files after random edits;
- numeric settings: a numeric key of the composed config set (as a command-line override) to a value out
  of range, of another type, NaN, infinite or huge; read by ``RunSettings.from_config``: accepted only as
  the finite number given.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from sesame.tasks.core.errors import UserError
from sesame.tasks.core.paths import shipped_path

READ = "read"
REFUSED = "user_error"

#: What gets inserted: the characters formats are made of, controls, other scripts, a broken UTF-8 byte.
PIECES = ["\t", ",", "\n", "\r", "\"", "'", "{", "}", "[", "]", ":", "\\", "\x00", "\x0b", "\u200b", "\u00e9",
          "\u4e2d", "\U0001f600", "-DOCSTART-", "B-", "I-", "O", "null", "-1", "1e999", "NaN", "\udcff"]

#: Pieces of text that is not space-separated English: CJK, right-to-left with direction marks, emoji
#: sequences, combining marks (also with no letter before them), invisible characters.
UNICODE_PIECES = ["我爱北京", "東京に住んでいます", "مرحبا بالعالم،", "\u200fשלום\u200f", "👨\u200d👩\u200d👧", "🇫🇷",
                  "👍🏽", "❤\ufe0f", "cafe\u0301", "nai\u0308ve", "\u0301", "\u200d", "\u200b", "\u2028", "\ufeff",
                  "नमस्ते", "Marie", "Curie", "Paris", "-", "'", ".", " ", "  ", "\t", "\x00", "O'Neil", "state-of-the-art"]

#: Random Unicode text: those pieces, and any characters.
UNICODE_TEXT = st.lists(st.sampled_from(UNICODE_PIECES) | st.text(max_size=4), max_size=10).map("".join)

#: Any JSON value (floats include NaN and infinities, which Python's json reads and writes).
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | UNICODE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _head(relative: str, lines: int) -> str:
    return "".join(Path(shipped_path(relative)).read_text(encoding="utf-8").splitlines(keepends=True)[:lines])


def _squad_head() -> str:
    data = json.loads(Path(shipped_path("squad_v1/dev.slice.json")).read_text(encoding="utf-8"))
    article = data["data"][0]
    small = {"version": data.get("version", "1.1"), "data": [{"title": article["title"], "paragraphs": article["paragraphs"][:1]}]}
    return json.dumps(small, ensure_ascii=False, indent=0)


@st.composite
def mutated(draw: st.DrawFn, text: str) -> bytes:
    """``text`` after 1-6 random edits, as bytes (sometimes not valid UTF-8)."""
    chars = list(text)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["delete", "replace", "insert", "duplicate_line", "drop_line", "cut"]))
        at = draw(st.integers(0, max(len(chars) - 1, 0)))
        piece = draw(st.sampled_from(PIECES) | st.text(min_size=1, max_size=3))
        if kind == "delete" and chars:
            del chars[at: at + draw(st.integers(1, 8))]
        elif kind == "replace" and chars:
            chars[at] = piece
        elif kind == "insert":
            chars.insert(at, piece)
        elif kind in ("duplicate_line", "drop_line"):
            lines = "".join(chars).splitlines(keepends=True)
            if lines:
                i = draw(st.integers(0, len(lines) - 1))
                lines = lines[:i + 1] + lines[i:] if kind == "duplicate_line" else lines[:i] + lines[i + 1:]
                chars = list("".join(lines))
        elif kind == "cut":
            chars = chars[:at]
    return "".join(chars).encode("utf-8", errors="surrogateescape")


#: The one message of several lines: a reader's list of a file's bad examples (``tasks/qa/readers.py``).
_PROBLEM_LIST = re.compile(r"\d+ bad \w+ in .+:")


def one_line(err: BaseException) -> str:
    """The message of a user error, checked to be one non-empty line (or a list of a file's bad examples)."""
    message = str(err).strip()
    assert message, "an empty message"
    assert "\n" not in message or _PROBLEM_LIST.fullmatch(message.splitlines()[0]), f"not one line: {message!r}"
    return message


# Data files --------------------------------------------------------------------------------------
SST2 = _head("glue/sst2/train.2k.tsv", 8)
WNUT = _head("wnut17/train.1k.conll", 40)
SWAG = _head("multiple_choice/train.csv", 6)
SQUAD = _squad_head()


def _reads_or_refuses(read: Callable[[Path], object], path: Path, data: bytes) -> str:
    path.write_bytes(data)
    try:
        read(path)
    except UserError as err:
        one_line(err)
        return REFUSED
    return READ


def _glue_tsv(folder: Path, data: bytes) -> str:
    from sesame.tasks.glue.readers import read_glue_tsv
    from sesame.tasks.glue.specs import glue_spec

    return _reads_or_refuses(lambda p: read_glue_tsv(p, glue_spec("sst2")), folder / "train.tsv", data)


def _table(folder: Path, example: tuple[bytes, str]) -> str:
    from sesame.tasks.glue.readers import read_table

    data, suffix = example
    return _reads_or_refuses(lambda p: read_table(p, "sentence", None, "label"), folder / f"train{suffix}", data)


def _table_json_lines(folder: Path, data: bytes) -> str:
    from sesame.tasks.glue.readers import read_table

    return _reads_or_refuses(lambda p: read_table(p, "text", None, "label"), folder / "train.jsonl", data)


def _ner_file(name: str) -> Callable[[Path, bytes], str]:
    def check(folder: Path, data: bytes) -> str:
        from sesame.tasks.ner.readers import read_examples

        return _reads_or_refuses(read_examples, folder / name, data)

    return check


def _squad_json(folder: Path, example: tuple[bytes, bool]) -> str:
    from sesame.tasks.qa.readers import read_squad

    data, impossible = example
    return _reads_or_refuses(lambda p: read_squad(p, allow_impossible=impossible), folder / "dev.json", data)


def _choices(name: str) -> Callable[[Path, bytes], str]:
    def check(folder: Path, data: bytes) -> str:
        from sesame.tasks.multiple_choice.readers import read_choices

        return _reads_or_refuses(read_choices, folder / name, data)

    return check


@dataclass(frozen=True)
class FileTarget:
    """A reader of data files: ``check(fresh folder, example) -> READ | REFUSED``."""

    name: str
    strategy: st.SearchStrategy
    check: Callable[[Path, Any], str]


_TABLE_JSON = "".join(json.dumps({"text": t, "label": int(y)}) + "\n"
                      for t, y in (line.rsplit("\t", 1) for line in SST2.splitlines()[1:]))
_NER_JSON = "".join(json.dumps({"tokens": s.split(), "tags": ["O"] * len(s.split())}) + "\n"
                    for s in ("Marie Curie lived in Paris", "hello world", "a b c"))
_SWAG_JSON = json.dumps({"context": "She opens the box.", "question": "Inside,", "endings": ["a cat.", "the sky."], "label": 0}) + "\n"

FILE_TARGETS = [
    FileTarget("glue_tsv", mutated(SST2), _glue_tsv),
    FileTarget("table_csv_tsv", st.tuples(mutated(SST2.replace("\t", ",")), st.sampled_from([".csv", ".tsv"])), _table),
    FileTarget("table_json_lines", mutated(_TABLE_JSON), _table_json_lines),
    FileTarget("ner_conll", mutated(WNUT), _ner_file("train.conll")),
    FileTarget("ner_json_lines", mutated(_NER_JSON), _ner_file("train.jsonl")),
    FileTarget("squad_json", st.tuples(mutated(SQUAD), st.booleans()), _squad_json),
    FileTarget("swag_csv", mutated(SWAG), _choices("train.csv")),
    FileTarget("swag_json_lines", mutated(_SWAG_JSON), _choices("train.jsonl")),
]


# sesame-predict input ----------------------------------------------------------------------------
#: Each task's input fields with a valid value (the strategy keeps, drops or replaces each).
PREDICT_FIELDS: dict[str, dict[str, Any]] = {
    "glue": {"text": "a gripping film"},
    "qa": {"question": "Who lived in Paris?", "context": "Marie Curie lived in Paris."},
    "ner": {"text": "Marie Curie lived in Paris."},
    "ner_tokens": {"tokens": ["Marie", "Curie", "lived", "in", "Paris", "."]},
    "multiple_choice": {"context": "She opens the box.", "question": "Inside, she finds", "endings": ["a cat.", "the sky."]},
}


@st.composite
def predict_record(draw: st.DrawFn, fields: dict[str, Any]) -> Any:
    """One input record: each field kept, dropped, replaced by random Unicode text (a list of it for a list
    field) or by any JSON value; sometimes an ``id`` and an unknown key; rarely not an object at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(JSON_VALUE)
    record: dict[str, Any] = {}
    for key, value in fields.items():
        kind = draw(st.sampled_from(["keep", "text", "text", "text", "drop", "json"]))
        if kind == "keep":
            record[key] = value
        elif kind == "text":
            record[key] = draw(st.lists(UNICODE_TEXT, max_size=6)) if isinstance(value, list) else draw(UNICODE_TEXT)
        elif kind == "json":
            record[key] = draw(JSON_VALUE)
    if draw(st.booleans()):
        record["id"] = draw(JSON_VALUE)
    if draw(st.integers(0, 4)) == 0:
        record[draw(st.text(max_size=6))] = draw(JSON_VALUE)
    return record


@st.composite
def predict_lines(draw: st.DrawFn, fields: dict[str, Any]) -> bytes:
    """A JSON-lines input file: 1-4 records, blank lines between some, sometimes edited (:func:`mutated`)."""
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        lines.append(json.dumps(draw(predict_record(fields)), ensure_ascii=draw(st.booleans())))
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.sampled_from(["", " ", "\t"])))
    text = "\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))
    if draw(st.integers(0, 3)) == 0:
        return draw(mutated(text))
    return text.encode("utf-8", errors="surrogateescape")


def _lines_as_read(path: Path) -> list[tuple[int, str]]:
    """``(line number, line)`` of the non-blank lines of ``path``, split as ``sesame-predict`` reads it
    (text mode, universal newlines)."""
    with open(path, encoding="utf-8") as handle:
        return [(n, line) for n, line in enumerate(handle, start=1) if line.strip()]


#: A field name in quotes, as the predictors' messages name the field.
_FIELD = re.compile(r"'[A-Za-z_]+(\[\d+\])?'")


def check_predict(predictor: Any, task: str, folder: Path, data: bytes) -> str:
    """``data`` as ``sesame-predict``'s INPUT file, predicted with ``predictor`` (a task's predictor)."""
    from sesame.tasks.cli.predict import utf8_lines

    path = folder / "input.jsonl"
    path.write_bytes(data)
    source = str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            outputs = [json.loads(json.dumps(o, ensure_ascii=False, allow_nan=False))  # as the command writes them
                       for o in predictor.predict_json_lines(utf8_lines(handle, source), source=source)]
    except UserError as err:
        message = one_line(err)
        assert source in message, f"the message does not name the file: {message}"
        if "not UTF-8" not in message:
            assert re.search(rf"{re.escape(source)}, line \d+", message), f"the message names no line: {message}"
            number = int(re.search(r", line (\d+)", message).group(1))
            line = dict(_lines_as_read(path)).get(number)
            assert line is not None, f"line {number} of the message is no input line: {message}"
            with contextlib.suppress(ValueError):
                if isinstance(json.loads(line), dict):
                    assert _FIELD.search(message) or "JSON object" in message, f"the message names no field: {message}"
        return REFUSED
    lines = _lines_as_read(path)
    assert len(outputs) == len(lines), f"{len(lines)} input lines, {len(outputs)} outputs"
    for (_, line), output in zip(lines, outputs):
        record = json.loads(line)
        if "id" in record:
            assert list(output)[0] == "id" and output["id"] == record["id"], "ids out of order"
        _check_output(predictor, task, record, output)
    return READ


def _check_output(predictor: Any, task: str, record: dict[str, Any], output: dict[str, Any]) -> None:
    if task == "qa":
        start, end = output["char_start"], output["char_end"]
        if start >= 0:
            assert record["context"][start:end] == output["answer"], (record["context"], start, end, output["answer"])
        else:
            assert output["answer"] == ""
        for entry in output.get("nbest", []):
            if entry["char_start"] >= 0:
                assert record["context"][entry["char_start"]:entry["char_end"]] == entry["text"]
    elif task in ("ner", "ner_tokens"):
        check_entity_spans(predictor, record, output)


def check_entity_spans(predictor: Any, record: dict[str, Any], output: dict[str, Any]) -> None:
    """Every entity of an NER output starts at a word's start and ends at a word's end (of the input's
    words: ``tokens``, or the words of ``text``), and its ``text`` is what those offsets hold."""
    from sesame.tasks.ner.predict import joined_offsets, split_words

    if "tokens" in record:
        text, offsets = joined_offsets(record["tokens"])
        assert output["tokens"] == record["tokens"]
    else:
        text = record["text"]
        words, offsets = split_words(text, predictor.tokenizer)
        assert output["tokens"] == words
    assert len(output["tags"]) == len(output["tokens"])
    starts, ends = set(offsets[:, 0].tolist()), set(offsets[:, 1].tolist())
    for entity in output["entities"]:
        assert entity["char_start"] in starts and entity["char_end"] in ends, (text, entity, offsets.tolist())
        assert text[entity["char_start"]:entity["char_end"]] == entity["text"]


# sesame-score ------------------------------------------------------------------------------------
SCORE_GOLD = json.dumps({"version": "1.1", "data": [{"title": "T", "paragraphs": [
    {"context": "Marie Curie lived in Paris.", "qas": [
        {"id": "q1", "question": "Who?", "answers": [{"text": "Marie Curie", "answer_start": 0}]},
        {"id": "q2", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 21}]},
        {"id": "q3", "question": "What?", "answers": [], "is_impossible": True}]}]}]}, indent=0)
SCORE_PREDICTIONS = json.dumps({"q1": "Marie Curie", "q2": "in Paris", "q3": ""}, indent=0)
SCORE_NULL_ODDS = json.dumps({"q1": -2.0, "q2": 0.5, "q3": 3.0})


@st.composite
def score_files(draw: st.DrawFn) -> tuple[str, bytes, bytes, bytes | None]:
    """``(version, predictions, gold, null odds or None)``: one or more of the files edited."""
    version = draw(st.sampled_from(["squad_v1", "squad_v2"]))
    which = draw(st.sets(st.sampled_from(["predictions", "gold", "odds"]), min_size=1))
    predictions = draw(mutated(SCORE_PREDICTIONS)) if "predictions" in which else SCORE_PREDICTIONS.encode()
    gold = draw(mutated(SCORE_GOLD)) if "gold" in which else SCORE_GOLD.encode()
    odds = None
    if version == "squad_v2" and draw(st.booleans()):
        odds = draw(mutated(SCORE_NULL_ODDS)) if "odds" in which else SCORE_NULL_ODDS.encode()
    return version, predictions, gold, odds


def check_score(folder: Path, example: tuple[str, bytes, bytes, bytes | None]) -> str:
    """``sesame-score`` on the files: scores (each within 0-100) or exit 2 naming the file."""
    from sesame.tasks.cli.score import main

    version, predictions, gold, odds = example
    files = {"predictions": folder / "predictions.json", "gold": folder / "gold.json", "odds": folder / "null_odds.json"}
    files["predictions"].write_bytes(predictions)
    files["gold"].write_bytes(gold)
    argv = [version, str(files["predictions"]), str(files["gold"])]
    if odds is not None:
        files["odds"].write_bytes(odds)
        argv += ["--na-prob-file", str(files["odds"])]
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exit_:
        assert exit_.code == 2, f"exit {exit_.code}: {err.getvalue()}"
        message = err.getvalue().strip()
        assert message.startswith("sesame-score: error: ") and "\n" not in message, message
        assert any(str(p) in message for p in files.values()) or "--na-prob" in message, f"names no file: {message}"
        return REFUSED
    assert code == 0
    scores = json.loads(out.getvalue())
    for key, value in scores.items():
        assert isinstance(value, (int, float)) and math.isfinite(value), (key, value)
        if not key.endswith(("total", "thresh")):
            assert 0 <= value <= 100, (key, value)
    return READ


# Numeric settings --------------------------------------------------------------------------------
#: ``(task overrides, numeric keys)``: the numeric settings of every block, per task that has them.
NUMERIC_KEYS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    ((), ("data.max_seq_length", "data.batch_size", "data.eval_batch_size", "data.max_train_examples",
          "data.max_eval_examples", "data.num_workers", "data.pad_to_multiple_of", "data.holdout_fraction",
          "data.holdout_seed", "finetune.head_lr", "finetune.encoder_lr", "finetune.weight_decay",
          "finetune.warmup_ratio", "finetune.adam_epsilon", "head.dropout", "head.label_smoothing",
          "trainer.early_stopping.patience", "trainer.early_stopping.min_delta", "seed")),
    (("task=squad_v1",), ("data.doc_stride", "head.n_best_size", "head.max_answer_length",
                          "head.null_score_diff_threshold")),
    (("task=ner",), ("head.dropout", "data.max_seq_length")),
]

#: Values of every kind, written as on the command line.
BAD_NUMBERS = ["nan", "NaN", "inf", "-inf", "1e999", "-1e999", "-1", "0", "-0.0", "1e30", "-1e30",
               "99999999999999999999999", "1.5", "0.999999", "abc", "true", "null", "'7'", "[1,2]", "{a: 1}", "''"]


@st.composite
def numeric_setting(draw: st.DrawFn) -> tuple[tuple[str, ...], str, str]:
    """``(task overrides, key, value as an override string)``."""
    task, keys = draw(st.sampled_from(NUMERIC_KEYS))
    value = draw(st.sampled_from(BAD_NUMBERS) | st.integers().map(str) | st.floats().map(repr))
    return task, draw(st.sampled_from(keys)), value


def _setting(settings: Any, key: str) -> Any:
    """The typed value of dotted ``key`` in ``RunSettings`` (``data.batch_size`` -> ``settings.data.batch_size``)."""
    if key == "seed":
        return settings.seed
    value: Any = settings
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part)
    return value


def check_setting(compose: Callable[..., Any], example: tuple[tuple[str, ...], str, str]) -> str:
    """``key=value`` over the task's config (composed by ``compose(*overrides)``), read by ``RunSettings``:
    accepted only as the finite number given, else a :class:`ConfigError` naming the key."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from sesame.tasks.base.run_settings import RunSettings

    task, key, value = example
    try:
        cfg = compose(*task, f"{key}={value}")
    except HydraException:  # Hydra's own refusal of an override (sesame-train shows its one-line message)
        return REFUSED
    given = OmegaConf.select(cfg, key, throw_on_missing=False)
    try:
        settings = RunSettings.from_config(cfg)
    except UserError as err:
        message = one_line(err)
        assert key in message or key.rsplit(".", 1)[-1] in message, f"the message does not name {key}: {message}"
        return REFUSED
    typed = _setting(settings, key)
    if typed is None:
        assert given is None
        return READ
    assert isinstance(typed, (int, float)) and not isinstance(typed, bool), (key, value, typed)
    assert math.isfinite(typed), f"{key}={value} accepted as {typed}"
    assert typed == (float(given) if isinstance(typed, float) else given), (key, value, given, typed)
    return READ


# What a check is given ---------------------------------------------------------------------------
@dataclass
class FuzzContext:
    """The resources of the checks: fresh folders, a predictor per task, a config composer."""

    predictors: dict[str, Any] = field(default_factory=dict)
    compose: Callable[..., Any] | None = None

    @contextlib.contextmanager
    def folder(self) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(prefix="sesame_fuzz_") as name:
            yield Path(name)


@dataclass(frozen=True)
class Target:
    """One fuzzed reader: ``check(context, example) -> READ | REFUSED`` (raises on an internal error)."""

    name: str
    strategy: st.SearchStrategy
    check: Callable[[FuzzContext, Any], str]


def _in_folder(check: Callable[[Path, Any], str]) -> Callable[[FuzzContext, Any], str]:
    def run(context: FuzzContext, example: Any) -> str:
        with context.folder() as folder:
            return check(folder, example)

    return run


def _predict(task: str) -> Callable[[FuzzContext, Any], str]:
    run_name = "ner" if task == "ner_tokens" else task

    def run(context: FuzzContext, example: bytes) -> str:
        with context.folder() as folder:
            return check_predict(context.predictors[run_name], task, folder, example)

    return run


#: Every fuzzed reader; ``predict_<task>`` need ``context.predictors[<task>]``, ``settings`` ``context.compose``.
TARGETS = [Target(t.name, t.strategy, _in_folder(t.check)) for t in FILE_TARGETS] + [
    *(Target(f"predict_{task}", predict_lines(fields), _predict(task)) for task, fields in PREDICT_FIELDS.items()),
    Target("score", score_files(), _in_folder(check_score)),
    Target("settings", numeric_setting(), lambda context, example: check_setting(context.compose, example)),
]

#: The trained tiny runs the predictors come from (``tests/tasks/inference/test_predictor.py``'s ``RUNS``).
PREDICT_RUNS = {"glue": "sst2", "qa": "squad_v1", "ner": "ner", "multiple_choice": "multiple_choice"}
