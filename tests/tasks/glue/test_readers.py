"""Reading GLUE TSVs and generic tables: real files, pairs, and bad input with clear errors."""

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import DataError, MissingFileError
from sesame.tasks.glue.readers import read_glue_tsv, read_table
from sesame.tasks.glue.specs import glue_spec
from sesame.tasks.core.paths import shipped_path


def test_real_sst2_dev_reads_whole():
    ds = read_glue_tsv(shipped_path("glue/sst2/dev.tsv"), glue_spec("sst2"))
    assert len(ds) == 872 and sum(ds["label"]) == 444  # 444 positive, as SOURCES.md counts


def test_pairs_headerless_and_regression(tmp_path):
    rte = tmp_path / "rte.tsv"
    rte.write_text('index\tsentence1\tsentence2\tlabel\n0\tA "quoted\tB.\tentailment\n1\tC\tD\tnot_entailment\n')
    ds = read_glue_tsv(rte, glue_spec("rte"))
    assert ds["text_a"] == ['A "quoted', "C"] and ds["text_b"] == ["B.", "D"] and ds["label"] == [0, 1]
    cola = tmp_path / "cola.tsv"
    cola.write_text("gj04\t1\t\tThe sailors rode.\ngj04\t0\t*\tRode the.\n")
    assert read_glue_tsv(cola, glue_spec("cola"))["label"] == [1, 0]
    stsb = tmp_path / "stsb.tsv"
    stsb.write_text("index\tsentence1\tsentence2\tscore\n0\ta\tb\t4.750\n")
    assert read_glue_tsv(stsb, glue_spec("stsb"))["label"] == [4.75]


@pytest.mark.parametrize(
    "content, task, message",
    [
        ("sentence\tlabel\nfine\t2\n", "sst2", r"bad.tsv:2: unknown label '2'"),
        ("text\tlabel\nfine\t1\n", "sst2", r"lacks the 'sentence' column"),
        ("sentence\tlabel\nonly one field\n", "sst2", r"bad.tsv:2: 1 tab-separated fields"),
        ("index\tsentence1\tsentence2\tscore\n0\ta\tb\thigh\n", "stsb", r"bad.tsv:2: label 'high' is not a number"),
        ("sentence\tlabel\n", "sst2", r"no examples"),
        ("", "sst2", r"is empty"),
    ],
)
def test_bad_files_name_file_line_and_fix(tmp_path, content, task, message):
    path = tmp_path / "bad.tsv"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        read_glue_tsv(path, glue_spec(task))


def test_missing_file_and_unknown_task(tmp_path):
    with pytest.raises(MissingFileError, match="no such file"):
        read_glue_tsv(tmp_path / "nope.tsv", glue_spec("sst2"))
    with pytest.raises(DataError, match="is a directory"):
        read_glue_tsv(tmp_path, glue_spec("sst2"))
    with pytest.raises(ValueError, match="not a GLUE task"):
        glue_spec("squad")


def test_generic_table_columns(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text("review,stars\ngood,5\nbad,1\n")
    table, _ = read_table(path, "review", None, "stars")
    assert table["review"] == ["good", "bad"]
    with pytest.raises(DataError, match=r"missing column\(s\) \['label'\]"):
        read_table(path, "review", None, "label")


@pytest.mark.parametrize("name, content, message", [
    # a line with fewer fields than the header: its label was read as a class 'None' of its own (and the
    # column's integers as floats, so the dev file's '1' was "unknown"), its missing text as the word 'None'
    ("train.tsv", "sentence\tlabel\ngood film\t1\nno label here\nbad film\t0\n",
     r"train.tsv:3: nothing in column 'label' \(data.label_column\): the line has fewer fields"),
    ("train.csv", "stars,review\n1,good film\n0\n", r"train.csv:3: nothing in column 'review' \(data.text_column\)"),
    ("train.jsonl", '{"review": "good", "stars": 1}\n{"review": "bad"}\n', r"train.jsonl:2: nothing in column 'stars'"),
])
def test_a_table_line_without_its_text_or_label_is_named(make_cfg, tmp_path, name, content, message):
    from sesame.tasks.runs.runner import build_datamodule

    path = tmp_path / name
    path.write_text(content)
    column = "sentence" if name.endswith(".tsv") else "review"
    dm = build_datamodule(RunSettings.from_config(make_cfg("task=text_classification", f"data.train_file={path}", "data.validation_file=null",
                                   f"data.text_column={column}", "data.label_column=" + ("label" if name.endswith(".tsv") else "stars"))))
    with pytest.raises(DataError, match=message):
        dm.setup("fit")


def test_an_evaluation_table_may_leave_labels_out_and_a_multi_label_example_may_have_none(make_cfg, tmp_path):
    from sesame.tasks.runs.runner import build_datamodule

    train = tmp_path / "train.tsv"
    train.write_text("text\tlabels\ngood film\ta|b\nno labels\t\nbad film\tb\n")
    dev = tmp_path / "dev.tsv"
    dev.write_text("text\tlabels\ngood\ta\nunlabelled\n")
    dm = build_datamodule(RunSettings.from_config(make_cfg("task=text_classification", f"data.train_file={train}", f"data.validation_file={dev}",
                                   "data.text_column=text", "data.label_column=labels", "data.multi_label=true",
                                   "data.metrics=[f1_micro,f1_macro]")))
    dm.setup("fit")
    assert dm.dataset("train")["labels"] == [[1.0, 1.0], [0.0, 0.0], [0.0, 1.0]]
    assert len(dm.dataset("validation")) == 2


def test_a_table_the_parser_refuses_is_named_in_one_line(tmp_path):
    # Found by fuzzing (tests/test_fuzz_readers.py): a NUL byte in a TSV header made the datasets
    # parser's message of several lines the error's message.
    path = tmp_path / "train.tsv"
    path.write_bytes(b"\x00entence,label\nfar less sophisticated and ,0\nfunny yet ,1\n")
    with pytest.raises(DataError) as err:
        read_table(path, "sentence", None, "label")
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: could not be parsed as csv: ")
    assert "must have the same columns" in message
