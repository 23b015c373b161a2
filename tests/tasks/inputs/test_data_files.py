"""The check every reader makes of a data file: a file that is not UTF-8 is named with its line and
column, whatever chunk the bad byte falls in (found by tests/test_fuzz_readers.py: it was an internal error)."""

from __future__ import annotations

import pytest

from sesame.tasks.core.errors import DataError
from sesame.tasks.inputs.data_files import check_data_file, check_json_lines, check_utf8


@pytest.mark.parametrize("data, line, column, byte", [
    (b"\xffsentence\tlabel\n", 1, 1, "ff"),
    (b"sentence\tlabel\nsome caf\xe9 text\t1\n", 2, 9, "e9"),
    ("ab\u4e2d\n".encode() * 5 + b"x\xe4\xb8", 6, 2, "e4"),  # a character cut short at the end
])
@pytest.mark.parametrize("chunk", [3, 4, 1 << 20])  # bad bytes and multibyte characters across chunk boundaries
def test_a_file_that_is_not_utf8_is_named_by_line_and_column(tmp_path, data, line, column, byte, chunk):
    path = tmp_path / "train.tsv"
    path.write_bytes(data)
    with pytest.raises(DataError, match=rf"train.tsv:{line}: byte 0x{byte} at column {column} is not UTF-8 text "
                                        r"\(data.train_file\). Fix: save the file as UTF-8"):
        check_utf8(path, "train_file", chunk=chunk)


def test_utf8_with_a_byte_order_mark_and_any_script_is_read(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes("\ufeffsentence\tlabel\n\u4e2d\u6587 \U0001f600 caf\u00e9\t1\n".encode())
    assert check_data_file(path, "train_file") == path


@pytest.mark.parametrize("lines, said", [
    (['{"text": "a", "label": 1}', '{"text": "b", "label": 1'], ":2: not valid JSON"),
    (['{"text": "a", "label": NaN}'], ":1: not valid JSON (NaN is not a JSON value)"),
    (['', '["text", "a"]'], ":2: a JSON list, not an object with 'text' and 'label'"),
])
def test_json_lines_are_checked_line_by_line_before_pyarrow_reads_them(tmp_path, lines, said):
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        check_json_lines(path, "'text' and 'label'")
    assert str(info.value).startswith(str(path)) and said in str(info.value)
    path.write_text('{"text": "a", "label": 1}\n\n{"text": "b", "label": 0}\n', encoding="utf-8")
    check_json_lines(path, "'text' and 'label'")  # valid lines pass (blank lines skipped)
