"""Read sentence(-pair) data into a ``datasets.Dataset`` with columns ``index, text_a[, text_b], label``.

GLUE TSVs are read with quoting off (their sentences hold unbalanced quotes); any CSV/TSV/JSON-lines
file with named columns goes through ``datasets.load_dataset``. Multi-label tables hold each
example's labels joined by a separator (``sports|politics``; empty: none) or, in JSON lines, as a
list; they become multi-hot rows. Errors name the file, the line or column, and the fix.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sesame.tasks.inputs.data_files import check_data_file, check_json_lines
from sesame.tasks.core.errors import DataError
from sesame.tasks.glue.specs import GlueTaskSpec

if TYPE_CHECKING:  # imported where a file is read: datasets (and pandas under it) take a second to import,
    import datasets  # and sesame-predict, which imports this module but reads no file, never needs them

csv.field_size_limit(1 << 24)


def _column_index(header: list[str] | None, column: str | int, path: Path) -> int | None:
    if isinstance(column, int):
        return column
    if header is None or column not in header:
        return None
    return header.index(column)


def read_glue_tsv(path: str | Path, spec: GlueTaskSpec, require_labels: bool = True, key: str = "train_file") -> datasets.Dataset:
    """One GLUE TSV. Without a label column (a test file) the label column is ``None``."""
    path = check_data_file(path, key)
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    header = rows.pop(0) if spec.has_header else None
    col_a = _column_index(header, spec.text_a, path)
    col_b = _column_index(header, spec.text_b, path) if spec.text_b is not None else None
    col_label = _column_index(header, spec.label, path)
    missing = [name for name, col in (("text", col_a), ("label", col_label)) if col is None]
    if spec.text_b is not None and col_b is None:
        missing.append("text pair")
    if missing and not (missing == ["label"] and not require_labels):
        wanted = {"text": spec.text_a, "text pair": spec.text_b, "label": spec.label}
        raise DataError(
            f"{path}: header {header} lacks the {', '.join(repr(wanted[m]) for m in missing)} column(s) that "
            "this GLUE task needs; is data.task_name right for this file?"
        )
    width = max(c for c in (col_a, col_b, col_label) if c is not None) + 1
    text_a, text_b, labels = [], [], []
    first_line = 2 if header is not None else 1
    for line_no, row in enumerate(rows, start=first_line):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) < width:
            raise DataError(
                f"{path}:{line_no}: {len(row)} tab-separated fields, expected at least {width}; "
                "fix or remove this line"
            )
        text_a.append(row[col_a])
        if col_b is not None:
            text_b.append(row[col_b])
        labels.append(row[col_label].strip() if col_label is not None else None)
    if not text_a:
        raise DataError(f"{path}: no examples (only a header?)")
    columns: dict[str, list[Any]] = {"index": list(range(len(text_a))), "text_a": text_a}
    if col_b is not None:
        columns["text_b"] = text_b
    columns["label"] = encode_labels(labels, spec.labels, path, first_line, spec.label_range)
    import datasets

    return datasets.Dataset.from_dict(columns)


def encode_labels(
    raw: list[Any], label_names: tuple[str, ...] | None, path: Path, first_line: int = 1,
    label_range: tuple[float, float] | None = None, column: str | None = None,
) -> list[Any]:
    """Label names -> class ids (or floats for regression, finite and within ``label_range``);
    ``None`` stays ``None`` (unlabelled). ``column``: the label column's name, for messages."""
    if label_names is None:
        out = []
        for i, value in enumerate(raw):
            where = f"{path}:{i + first_line}"
            try:
                score = None if value is None else float(value)
            except ValueError:
                raise DataError(f"{where}: label {value!r} is not a number, and this task is a regression") from None
            if score is not None and not math.isfinite(score):
                raise DataError(f"{where}: label {value!r} is not a finite number. Fix the score on this line")
            if score is not None and label_range and not label_range[0] <= score <= label_range[1]:
                low, high = label_range
                raise DataError(f"{where}: score {score:g} lies outside this task's range {low:g}-{high:g}. Fix the score")
            out.append(score)
        return out
    ids = {name: i for i, name in enumerate(label_names)}
    out = []
    for i, value in enumerate(raw):
        if value is None:
            out.append(None)
            continue
        key = str(value).strip()
        if key not in ids:
            raise DataError(
                f"{path}:{i + first_line}: unknown label {value!r}{f' in column {column!r}' if column else ''}; "
                f"this task's labels are {list(label_names)} "
                "(fix the file, or set data.label_names for a custom dataset)"
            )
        out.append(ids[key])
    return out


def first_data_line(path: Path) -> int:
    """The file line of a table's first example: 2 under a CSV/TSV header, 1 in JSON lines."""
    return 1 if path.suffix.lower() in (".jsonl", ".json") else 2


def split_labels(value: Any, separator: str) -> list[str]:
    """One example's labels: a JSON list as it is, a string split at ``separator``; None or an empty
    string is no label. Each label is stripped; empty pieces (``a||b``) are dropped."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(separator)
    return [label for label in (str(item).strip() for item in items if item is not None) if label]


def multi_label_set(raw: list[Any], separator: str, path: Path, column: str) -> tuple[str, ...]:
    """The sorted union of the labels of every example (a training file's label set)."""
    names = sorted({label for value in raw for label in split_labels(value, separator)})
    if not names:
        raise DataError(f"{path}: column {column!r} holds no labels; a multi-label file lists each example's labels "
                        f"there, joined by {separator!r} (data.label_separator) or as a JSON list")
    return tuple(names)


def encode_multi_labels(
    raw: list[Any], label_names: tuple[str, ...], separator: str, path: Path, column: str, first_line: int
) -> list[list[float]]:
    """Each example's labels -> a multi-hot row [C] (1.0 where the label applies)."""
    ids = {name: i for i, name in enumerate(label_names)}
    out = []
    for i, value in enumerate(raw):
        row = [0.0] * len(label_names)
        for label in split_labels(value, separator):
            if label not in ids:
                raise DataError(
                    f"{path}:{i + first_line}: unknown label {label!r} in column {column!r} (value {value!r}); the labels "
                    f"are {list(label_names)} (those of data.train_file, or data.label_names). Fix the file, or list the "
                    f"label in data.label_names; labels are joined by data.label_separator={separator!r}"
                )
            row[ids[label]] = 1.0
        out.append(row)
    return out


def read_table(
    path: str | Path, text_column: str, text_pair_column: str | None, label_column: str, key: str = "train_file",
    labels_as_text: bool = False,
) -> tuple[datasets.Dataset, Path]:
    """Any CSV, TSV or JSON-lines file with named columns (raw labels, not yet encoded).
    ``labels_as_text``: read a CSV/TSV label column as strings (multi-label ``1|2`` and ``3`` alike)."""
    path = check_data_file(path, key)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        builder, kwargs = "json", {}
    elif suffix in (".csv", ".tsv", ".txt"):
        builder, kwargs = "csv", {"delimiter": "\t" if suffix != ".csv" else ","}
        if labels_as_text:
            kwargs["converters"] = {label_column: str}  # as written: "1|2", "3" and "" alike
    else:
        raise DataError(f"{path}: unknown format {suffix!r}; use .csv, .tsv or .jsonl")
    if builder == "json":
        check_json_lines(path, f"the columns {', '.join(repr(c) for c in (text_column, text_pair_column, label_column) if c)}")
    import datasets

    try:
        table = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
    except Exception as err:  # datasets wraps parser errors in several types
        # Its messages run over several lines (the cause after a generic first line): one line, cause kept.
        said = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        raise DataError(f"{path}: could not be parsed as {builder}: {said[:400]}") from err
    wanted = [c for c in (text_column, text_pair_column, label_column) if c is not None]
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {missing}; it has {table.column_names}. "
            "Set data.text_column / data.text_pair_column / data.label_column"
        )
    return table, path
