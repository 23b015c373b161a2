"""Reading and validating SQuAD v1.1 / v2.0 JSON files into one row per question.

Rows are ``id, title, context, question, answers{text, answer_start}`` (:data:`SQUAD_FEATURES`;
empty ``answers`` = unanswerable, SQuAD v2). Every problem names the file, the question id, the
field and a fix; ``on_bad_example="skip"`` drops the offending questions instead, with a count in
the log. Windows are made from the rows in ``tasks/qa/windows.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from sesame.tasks.inputs.data_files import check_data_file
from sesame.tasks.qa.settings import check_bad_example_mode
from sesame.tasks.core.errors import DataError

log = logging.getLogger(__name__)

SQUAD_FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "title": datasets.Value("string"),
        "context": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answers": datasets.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")}),
    }
)
_SHOWN_PROBLEMS = 5  # problems listed in an error / log message


@dataclass
class LoadReport:
    """What reading a file kept and dropped."""

    path: str
    kept: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)


def report_problems(report: LoadReport, on_bad_example: str, what: str) -> None:
    """Raise the problems of ``report`` as one :class:`DataError` ("error"), or log them ("skip")."""
    if not report.problems:
        return
    listed = "\n  ".join(report.problems[:_SHOWN_PROBLEMS])
    more = f"\n  ... and {len(report.problems) - _SHOWN_PROBLEMS} more" if len(report.problems) > _SHOWN_PROBLEMS else ""
    if on_bad_example == "error":
        raise DataError(
            f"{len(report.problems)} bad {what} in {report.path}:\n  {listed}{more}\n"
            "(set data.on_bad_example=skip to drop them and continue)"
        )
    log.warning("skipped %d question(s) in %s (%d problem(s)):\n  %s%s",
                report.skipped, report.path, len(report.problems), listed, more)


def _read_articles(path: Path) -> list[dict]:
    """The ``data`` list of a SQuAD JSON file, via ``datasets``; precise errors on failure."""
    try:
        ds = datasets.load_dataset("json", data_files=str(path), field="data", split="train")
        return ds.to_list()
    except Exception as exc:  # datasets wraps the cause; read the file ourselves to say what is wrong
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except json.JSONDecodeError as jexc:
            raise DataError(
                f"{path}: not valid JSON: {jexc.msg} at line {jexc.lineno}, column {jexc.colno}. "
                "Fix: repair the file (e.g. check it with `python -m json.tool`)"
            ) from None
        except UnicodeDecodeError as uexc:
            raise DataError(f"{path}: not UTF-8 text ({uexc}). Fix: re-save the file as UTF-8") from None
        if not isinstance(raw, dict) or "data" not in raw:
            raise DataError(
                f"{path}: missing top-level field 'data'. Fix: SQuAD files are "
                '{"version": ..., "data": [{"title": ..., "paragraphs": [...]}]}'
            ) from None
        if not isinstance(raw["data"], list):
            raise DataError(f"{path}: field 'data' must be a list of articles, got {type(raw['data']).__name__}") from None
        # Valid JSON that Arrow cannot type (e.g. an answer_start given as a string somewhere):
        # validate the plain objects, which names the exact field.
        log.debug("datasets could not load %s (%s); validating the raw JSON", path, exc)
        return raw["data"]


def _where(path: Path, ai: int, title: Any, pi: int, qid: Any = None) -> str:
    q = f"question {qid!r} " if qid is not None else ""
    return f"{path}: {q}(article {ai} {title!r}, paragraph {pi})"


def _answer_problem(context: str, ans: Any, k: int) -> str | None:
    """Why answer ``k`` is unusable, with a fix; None when it is fine."""
    if not isinstance(ans, Mapping):
        return f"answers[{k}] must be an object {{text, answer_start}}, got {type(ans).__name__}"
    text, start = ans.get("text"), ans.get("answer_start")
    if text is None:
        return f"answers[{k}] is missing field 'text'. Fix: add the answer string"
    if start is None:
        return f"answers[{k}] is missing field 'answer_start'. Fix: add the character offset of the answer in the context"
    if not isinstance(text, str):
        return f"answers[{k}].text must be a string, got {type(text).__name__}"
    if isinstance(start, bool) or not isinstance(start, int):
        return f"answers[{k}].answer_start must be an integer, got {start!r}. Fix: use a number, not a string"
    if not text.strip():
        return f"answers[{k}].text is empty. Fix: remove the answer, or give its text"
    if context[start : start + len(text)] != text:
        found = context.find(text)
        fix = (f"set answer_start to {found}" if found >= 0 else "the text does not occur in the context; correct the text")
        return (
            f"answers[{k}].answer_start={start} points at {context[start:start + len(text)]!r}, "
            f"not at the answer text {text!r}. Fix: {fix}"
        )
    return None


def read_squad(
    path: str | Path, *, allow_impossible: bool, on_bad_example: str = "error", key: str = "validation_file"
) -> tuple[datasets.Dataset, LoadReport]:
    """Read and validate a SQuAD v1.1 / v2.0 JSON file into one row per question.

    Args:
        path: the JSON file (``{"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``).
        allow_impossible: accept questions without answers (``is_impossible`` / empty ``answers``),
            i.e. SQuAD v2. With False such a question is a bad example.
        on_bad_example: "error" raises :class:`DataError` listing the problems; "skip" drops
            the bad questions and logs how many.

    Returns:
        ``(rows, report)``: a ``datasets.Dataset`` with :data:`SQUAD_FEATURES`, and what was dropped.
    """
    check_bad_example_mode(on_bad_example)
    path = check_data_file(path, key)
    articles = _read_articles(path)
    report = LoadReport(str(path))
    cols: dict[str, list] = {k: [] for k in ("id", "title", "context", "question", "answers")}
    seen: set[str] = set()

    def bad(message: str, n_questions: int = 1) -> None:
        report.problems.append(message)
        report.skipped += n_questions

    for ai, article in enumerate(articles):
        if not isinstance(article, Mapping) or not isinstance(article.get("paragraphs"), list):
            bad(f"{path}: article {ai}: missing field 'paragraphs' (a list). Fix: add the article's paragraphs", 0)
            continue
        title = article.get("title") or ""
        for pi, para in enumerate(article["paragraphs"]):
            if not isinstance(para, Mapping):
                bad(f"{path}: article {ai}, paragraph {pi}: must be an object {{context, qas}}", 0)
                continue
            qas = para.get("qas")
            if not isinstance(qas, list):
                bad(f"{_where(path, ai, title, pi)}: missing field 'qas' (a list). Fix: add the questions", 0)
                continue
            context = para.get("context")
            if not isinstance(context, str) or not context.strip():
                what = "missing field 'context'" if context is None else "empty context"
                bad(f"{_where(path, ai, title, pi)}: {what}; its {len(qas)} question(s) cannot be answered. "
                    "Fix: give the paragraph its text", len(qas))
                continue
            for qi, qa in enumerate(qas):
                if not isinstance(qa, Mapping):
                    bad(f"{_where(path, ai, title, pi)}: qas[{qi}] must be an object")
                    continue
                qid = qa.get("id")
                where = _where(path, ai, title, pi, qid if qid is not None else f"qas[{qi}]")
                if not isinstance(qid, str) or not qid:
                    bad(f"{where}: missing field 'id'. Fix: give every question a unique string id")
                    continue
                if qid in seen:
                    bad(f"{where}: duplicate id. Fix: ids must be unique (predictions are keyed by id)")
                    continue
                question = qa.get("question")
                if not isinstance(question, str) or not question.strip():
                    bad(f"{where}: missing or empty field 'question'. Fix: add the question text")
                    continue
                answers = qa.get("answers")
                impossible = bool(qa.get("is_impossible") or False)
                if answers is None and not impossible:
                    bad(f"{where}: missing field 'answers'. Fix: add a list of {{text, answer_start}}")
                    continue
                answers = answers or []
                if not isinstance(answers, list):
                    bad(f"{where}: field 'answers' must be a list, got {type(answers).__name__}")
                    continue
                if impossible and answers:
                    bad(f"{where}: is_impossible is true but 'answers' is not empty. "
                        "Fix: move them to 'plausible_answers' or set is_impossible false")
                    continue
                if not answers and not allow_impossible:
                    bad(f"{where}: no answers; SQuAD v1.1 needs at least one. "
                        "Fix: add an answer, or use task=squad_v2 for unanswerable questions")
                    continue
                problem = next(filter(None, (_answer_problem(context, a, k) for k, a in enumerate(answers))), None)
                if problem:
                    bad(f"{where}: {problem}")
                    continue
                seen.add(qid)
                cols["id"].append(qid)
                cols["title"].append(str(title))
                cols["context"].append(context)
                cols["question"].append(question)
                cols["answers"].append(
                    {"text": [a["text"] for a in answers], "answer_start": [int(a["answer_start"]) for a in answers]}
                )
    report.kept = len(cols["id"])
    report_problems(report, on_bad_example, what="examples")
    if report.kept == 0:
        raise DataError(f"{path}: no usable questions (read {report.skipped} bad ones). Fix: check the file is SQuAD format")
    return datasets.Dataset.from_dict(cols, features=SQUAD_FEATURES), report
