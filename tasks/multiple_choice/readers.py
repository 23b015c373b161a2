"""Multiple-choice files -> one validated row per question: ``index, context, question, endings, label``.

Two forms, chosen by the file's suffix:

- SWAG's CSV (``.csv``; rowanz/swagaf, and Hugging Face's ``swag`` ``regular`` files): columns ``sent1``
  (the context), ``sent2`` (the start of the ending, prefixed to each ending), ``ending0`` ... ``endingN``
  and ``label`` (the index of the right ending; absent or empty in a test file). Other columns
  (``video-id``, ``fold-ind``, ``startphrase``, ``gold-source``) are ignored.
- JSON lines (``.jsonl`` / ``.json``): ``{"context": "...", "question": "..." (optional), "endings":
  ["...", "..."], "label": 1}`` (``label`` optional in a test file). Questions may have different
  numbers of endings (ARC: 3-5), at least 2 each.

Errors name the file, the line, the field and the fix.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sesame.tasks.base.predictor import string_field
from sesame.tasks.core.errors import DataError
from sesame.tasks.inputs.data_files import check_data_file

csv.field_size_limit(1 << 24)

ENDING_COLUMN = re.compile(r"ending(\d+)$")
JSON_EXAMPLE = '{"context": "She opens the box.", "question": "Inside, she finds", "endings": ["a cat.", "the sky."], "label": 0}'


@dataclass(frozen=True)
class ChoiceQuestion:
    """One question: the context, the text every ending continues (may be empty), the endings, and
    the index of the right one (None in a test file)."""

    context: str
    question: str
    endings: tuple[str, ...]
    label: int | None = None


def read_choices(path: str | Path, key: str = "train_file", require_labels: bool = True) -> list[ChoiceQuestion]:
    """The questions of a SWAG CSV or a JSON-lines file (by suffix); ``key`` names the setting
    (``data.train_file``) in errors."""
    path = check_data_file(path, key)
    reader = _read_json_lines if path.suffix.lower() in (".jsonl", ".json") else _read_swag_csv
    questions = reader(path)
    if not questions:
        raise DataError(f"{path}: no questions (only a header?) (data.{key})")
    if require_labels:
        unlabelled = next((i for i, q in enumerate(questions) if q.label is None), None)
        if unlabelled is not None:
            raise DataError(f"{path}: question {unlabelled + 1} has no label, which data.{key} needs to train on. "
                            "Fix: give every question its label (the index of the right ending, from 0)")
    return questions


def _label(value: Any, count: int, where: str, fix: str) -> int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        label = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        label = None
    if label is None or str(value).strip() != str(label):
        raise DataError(f"{where}: label {value!r} is not an ending's index. Fix: {fix}")
    if not 0 <= label < count:
        raise DataError(f"{where}: label {label} but the question has {count} endings (0-{count - 1}). Fix: {fix}")
    return label


def _text(value: Any, field: str, where: str, fix: str, required: bool = True) -> str:
    """``value`` as stripped text, checked by the rule every task's input follows (``string_field``)."""
    return (string_field({field: value}, field, where, fix, required=required) or "").strip()


def _read_swag_csv(path: Path) -> list[ChoiceQuestion]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle))
    header = rows.pop(0) if rows else []
    endings = sorted(((int(m.group(1)), i) for i, name in enumerate(header) if (m := ENDING_COLUMN.match(name))))
    missing = [c for c in ("sent1", "sent2") if c not in header]
    if missing or len(endings) < 2:
        raise DataError(f"{path}: header {header} lacks {', '.join(missing) or 'ending0, ending1'}: a SWAG CSV has "
                        "sent1 (the context), sent2 (the ending's start), ending0 ... endingN and label. Fix the header, "
                        f"or give JSON lines (.jsonl) such as {JSON_EXAMPLE}")
    if [n for n, _ in endings] != list(range(len(endings))):
        raise DataError(f"{path}: ending columns {[f'ending{n}' for n, _ in endings]} are not numbered from 0 without "
                        "gaps. Fix the header")
    sent1, sent2 = header.index("sent1"), header.index("sent2")
    label_col = header.index("label") if "label" in header else None
    fix = "give sent1, sent2, every ending and the label (0 to the last ending) on this line"
    questions = []
    for line_no, row in enumerate(rows, start=2):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        where = f"{path}:{line_no}"
        if len(row) != len(header):
            raise DataError(f"{where}: {len(row)} comma-separated fields, the header has {len(header)}. Fix: quote "
                            "fields that hold commas, or remove this line")
        texts = [_text(row[i], f"ending{n}", where, fix) for n, i in endings]
        questions.append(ChoiceQuestion(
            _text(row[sent1], "sent1", where, fix), _text(row[sent2], "sent2", where, fix, required=False), tuple(texts),
            _label(row[label_col], len(texts), where, fix) if label_col is not None else None))
    return questions


def _read_json_lines(path: Path) -> list[ChoiceQuestion]:
    fix = f"give one object per line, e.g. {JSON_EXAMPLE}"
    questions = []
    with path.open(encoding="utf-8-sig") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: not JSON ({err.msg} at column {err.colno}). Fix: {fix}") from None
            questions.append(choice_question(record, where, fix))
    return questions


def choice_question(record: Any, where: str, fix: str, with_label: bool = True) -> ChoiceQuestion:
    """One JSON object as a question (what the JSON-lines reader and ``sesame-predict`` read)."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}. Fix: {fix}")
    endings = record.get("endings")
    if not isinstance(endings, list) or len(endings) < 2:
        got = "none" if endings is None else f"{type(endings).__name__} {endings!r:.60}"
        raise DataError(f"{where}: 'endings' must be a list of at least 2 strings, got {got}. Fix: {fix}")
    texts = tuple(_text(e, f"endings[{i}]", where, fix) for i, e in enumerate(endings))
    label = _label(record.get("label"), len(texts), where, fix) if with_label else None
    return ChoiceQuestion(_text(record.get("context"), "context", where, fix),
                          _text(record.get("question"), "question", where, fix, required=False), texts, label)
