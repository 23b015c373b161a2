"""NER files -> sentences of words and tag strings (:class:`NerExamples`); tags are checked, not converted.

CoNLL-style text: one ``token ... tag`` line per word, blank (or whitespace-only) lines between
sentences, ``-DOCSTART-`` lines skipped; columns split on tabs when the line has one, else on
whitespace; the tag is in column ``tag_column``. JSON lines: ``{"tokens": [...], "tags": [...]}`` per
line, read through ``datasets.load_dataset("json")``. Every error names the file, the line and the
fix. A tag must be ``O``, ``B-TYPE`` or ``I-TYPE`` (:func:`check_tag`); tag schemes and tag ids are
in ``tasks/ner/tags.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sesame.tasks.inputs.data_files import check_data_file, check_json_lines
from sesame.tasks.core.errors import ConfigError, DataError, UserError

DOCSTART = "-DOCSTART-"
FORMATS = ("auto", "conll", "jsonl")


@dataclass
class NerExamples:
    """Sentences of one file. ``lines[i]`` is the line of sentence ``i``'s first word (1-based).

    In CoNLL files word ``j`` of sentence ``i`` is on line ``lines[i] + j``; in JSON lines the whole
    sentence is on line ``lines[i]`` (``per_word_lines`` False).
    """

    path: Path
    tokens: list[list[str]]
    tags: list[list[str]]
    lines: list[int]
    per_word_lines: bool = True

    def __len__(self) -> int:
        return len(self.tokens)

    def where(self, sentence: int, word: int) -> str:
        """``file:line`` (plus the word position for JSON lines) for error messages."""
        if self.per_word_lines:
            return f"{self.path}:{self.lines[sentence] + word}"
        return f"{self.path}:{self.lines[sentence]} (word {word})"

    def head(self, n: int | None) -> NerExamples:
        """The first ``n`` sentences (all when ``n`` is None)."""
        if n is None or n >= len(self):
            return self
        return NerExamples(self.path, self.tokens[:n], self.tags[:n], self.lines[:n], self.per_word_lines)


def check_tag(tag: str, where: str, hint: str, error: type[UserError] = DataError) -> None:
    """Raise ``error`` (naming ``where``, with ``hint``) unless ``tag`` is ``O``, ``B-TYPE`` or ``I-TYPE``."""
    if tag == "O" or (len(tag) > 2 and tag[1] == "-" and tag[0] in "BI"):
        return
    if not tag:
        raise error(f"{where}: empty tag; every word needs a tag ('O' outside entities)")
    raise error(f"{where}: tag {tag!r} is not BIO/IOB ('O', 'B-TYPE' or 'I-TYPE'); {hint}")



def read_conll(path: str | Path, tag_column: int = -1) -> NerExamples:
    """Read a CoNLL-style file (see the module docstring); every line must have the same columns."""
    path = Path(path)
    tokens: list[list[str]] = []
    tags: list[list[str]] = []
    lines: list[int] = []
    words: list[str] = []
    labels: list[str] = []
    width: int | None = None
    width_line = 0
    hint = f"is data.tag_column={tag_column} the tag column?"

    def close() -> None:
        if words:
            tokens.append(list(words))
            tags.append(list(labels))
            words.clear()
            labels.clear()

    with path.open(encoding="utf-8-sig") as handle:
        for line_no, raw in enumerate(handle, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip():  # blank or whitespace-only (WNUT-17 train separates with a tab)
                close()
                continue
            columns = line.split("\t") if "\t" in line else line.split()
            if columns[0] == DOCSTART:
                close()
                continue
            where = f"{path}:{line_no}"
            if width is None:
                width, width_line = len(columns), line_no
                if width < 2:
                    raise DataError(
                        f"{where}: one column ({line!r}); expected a token and a tag separated by a tab or spaces"
                    )
                if not -width <= tag_column < width or tag_column in (0, -width):
                    raise DataError(
                        f"{where}: data.tag_column={tag_column} does not name a tag column of this "
                        f"{width}-column file (column 0 is the token); use e.g. -1 for the last column"
                    )
            elif len(columns) != width:
                raise DataError(
                    f"{where}: {len(columns)} columns, but line {width_line} has {width}; every word line "
                    f"needs the same columns (tab-separated, or whitespace-separated without tabs). Fix this line."
                )
            token, tag = columns[0], columns[tag_column].strip()
            if not token.strip():
                raise DataError(f"{where}: empty token; remove the line or put the word in the first column")
            check_tag(tag, where, hint)
            if not words:
                lines.append(line_no)
            words.append(token)
            labels.append(tag)
    close()
    if not tokens:
        raise DataError(f"{path}: no sentences found (only blank or -DOCSTART- lines)")
    return NerExamples(path, tokens, tags, lines)


def _json_line_numbers(path: Path) -> list[int]:
    """The 1-based numbers of the non-blank lines of ``path`` (one JSON record each)."""
    with path.open(encoding="utf-8-sig") as handle:
        return [n for n, line in enumerate(handle, start=1) if line.strip()]


def read_jsonl(path: str | Path) -> NerExamples:
    """Read JSON lines ``{"tokens": [str, ...], "tags": [str, ...]}`` via ``datasets``."""
    path = Path(path)
    check_json_lines(path, "'tokens' and 'tags'")
    try:
        import datasets

        ds = datasets.load_dataset("json", data_files=str(path), split="train")
    except Exception as err:  # valid JSON lines pyarrow still refuses (mixed types across lines)
        said = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        raise DataError(f"{path}: could not be read as JSON lines: {said[:300]}") from err
    missing = [c for c in ("tokens", "tags") if c not in ds.column_names]
    if missing:
        extra = " (tag ids such as 'ner_tags' must be written out as tag strings)" if "ner_tags" in ds.column_names else ""
        raise DataError(
            f"{path}: records lack the {missing} field(s); each line must be "
            f'{{"tokens": [...], "tags": [...]}}; found fields {ds.column_names}{extra}'
        )
    numbers = _json_line_numbers(path)
    if len(numbers) != len(ds):  # not one record per line (a JSON array?): fall back to record numbers
        numbers = list(range(1, len(ds) + 1))
    tokens, tags = ds["tokens"], ds["tags"]
    for i, (words, labels) in enumerate(zip(tokens, tags)):
        where = f"{path}:{numbers[i]}"
        if not isinstance(words, list) or not isinstance(labels, list):
            raise DataError(f"{where}: 'tokens' and 'tags' must be lists of strings")
        if not words:
            raise DataError(f"{where}: empty sentence; remove the line")
        if len(words) != len(labels):
            raise DataError(f"{where}: {len(words)} tokens but {len(labels)} tags; give one tag per token")
        for j, (word, tag) in enumerate(zip(words, labels)):
            if not isinstance(word, str) or not word.strip():
                raise DataError(f"{where} (word {j}): token {word!r} is not a non-empty string")
            if not isinstance(tag, str):
                raise DataError(f"{where} (word {j}): tag {tag!r} is not a string; write tags as 'O', 'B-X', 'I-X'")
            check_tag(tag, f"{where} (word {j})", "fix the tags of this record")
    return NerExamples(path, [list(w) for w in tokens], [list(t) for t in tags], numbers, per_word_lines=False)


def detect_format(path: Path, fmt: str = "auto") -> str:
    """``conll`` or ``jsonl``: as given, or from the extension / first character for ``auto``."""
    if fmt not in FORMATS:
        raise ConfigError(f"data.format={fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt != "auto":
        return fmt
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    with path.open(encoding="utf-8-sig") as handle:
        for line in handle:
            if line.strip():
                return "jsonl" if line.lstrip().startswith("{") else "conll"
    return "conll"


def read_examples(path: str | Path, fmt: str = "auto", tag_column: int = -1, key: str = "train_file") -> NerExamples:
    """Read one file as CoNLL or JSON lines (``fmt``: auto | conll | jsonl); ``key`` names its setting."""
    path = check_data_file(path, key)
    if detect_format(path, fmt) == "jsonl":
        return read_jsonl(path)
    return read_conll(path, tag_column)
