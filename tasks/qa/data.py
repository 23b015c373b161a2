"""SQuAD-format data: reading and validation, windowed tokenisation, and the LightningDataModule.

Reading goes through ``datasets.load_dataset("json", field="data")`` and is flattened to one row per
question: ``id, title, context, question, answers{text, answer_start}`` (an empty ``answers`` =
unanswerable, SQuAD v2). Every problem is reported with the file, the question id, the field and a
fix; ``on_bad_example="skip"`` drops the offending questions instead, with a count in the log.

Tokenisation is question + context with ``truncation="only_second"``: a long context becomes
several windows of at most ``max_seq_length`` tokens overlapping by ``doc_stride`` tokens. Nothing
is padded here; the collator pads each batch to its own longest window.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizerBase

from sesame.tasks.batching import make_loader
from sesame.tasks.config_access import config_value
from sesame.tasks.datamodule import SplitDataModule

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
BAD_EXAMPLE_MODES = ("error", "skip")
_SHOWN_PROBLEMS = 5  # problems listed in an error / log message


class SquadDataError(ValueError):
    """A SQuAD file or example that cannot be used; the message names file, question, field and fix."""


@dataclass
class LoadReport:
    """What reading a file kept and dropped."""

    path: str
    kept: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)


# Reading ---------------------------------------------------------------------------------------------
def _read_articles(path: Path) -> list[dict]:
    """The ``data`` list of a SQuAD JSON file, via ``datasets``; precise errors on failure."""
    if not path.is_file():
        raise FileNotFoundError(f"SQuAD file not found: {path}. Fix: point data.train_file / data.validation_file at it")
    try:
        ds = datasets.load_dataset("json", data_files=str(path), field="data", split="train")
        return ds.to_list()
    except Exception as exc:  # datasets wraps the cause; read the file ourselves to say what is wrong
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except json.JSONDecodeError as jexc:
            raise SquadDataError(
                f"{path}: not valid JSON: {jexc.msg} at line {jexc.lineno}, column {jexc.colno}. "
                "Fix: repair the file (e.g. check it with `python -m json.tool`)"
            ) from None
        except UnicodeDecodeError as uexc:
            raise SquadDataError(f"{path}: not UTF-8 text ({uexc}). Fix: re-save the file as UTF-8") from None
        if not isinstance(raw, dict) or "data" not in raw:
            raise SquadDataError(
                f"{path}: missing top-level field 'data'. Fix: SQuAD files are "
                '{"version": ..., "data": [{"title": ..., "paragraphs": [...]}]}'
            ) from None
        if not isinstance(raw["data"], list):
            raise SquadDataError(f"{path}: field 'data' must be a list of articles, got {type(raw['data']).__name__}") from None
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
    path: str | Path, *, allow_impossible: bool, on_bad_example: str = "error"
) -> tuple[datasets.Dataset, LoadReport]:
    """Read and validate a SQuAD v1.1 / v2.0 JSON file into one row per question.

    Args:
        path: the JSON file (``{"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``).
        allow_impossible: accept questions without answers (``is_impossible`` / empty ``answers``),
            i.e. SQuAD v2. With False such a question is a bad example.
        on_bad_example: "error" raises :class:`SquadDataError` listing the problems; "skip" drops
            the bad questions and logs how many.

    Returns:
        ``(rows, report)``: a ``datasets.Dataset`` with :data:`SQUAD_FEATURES`, and what was dropped.
    """
    if on_bad_example not in BAD_EXAMPLE_MODES:
        raise ValueError(f"data.on_bad_example must be one of {BAD_EXAMPLE_MODES}, got {on_bad_example!r}")
    path = Path(path)
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
    _handle_problems(report, on_bad_example, what="examples")
    if report.kept == 0:
        raise SquadDataError(f"{path}: no usable questions (read {report.skipped} bad ones). Fix: check the file is SQuAD format")
    return datasets.Dataset.from_dict(cols, features=SQUAD_FEATURES), report


def _handle_problems(report: LoadReport, on_bad_example: str, what: str) -> None:
    if not report.problems:
        return
    listed = "\n  ".join(report.problems[:_SHOWN_PROBLEMS])
    more = f"\n  ... and {len(report.problems) - _SHOWN_PROBLEMS} more" if len(report.problems) > _SHOWN_PROBLEMS else ""
    if on_bad_example == "error":
        raise SquadDataError(
            f"{len(report.problems)} bad {what} in {report.path}:\n  {listed}{more}\n"
            "(set data.on_bad_example=skip to drop them and continue)"
        )
    log.warning("skipped %d question(s) in %s (%d problem(s)):\n  %s%s",
                report.skipped, report.path, len(report.problems), listed, more)


# Tokenisation ----------------------------------------------------------------------------------------
def check_question_lengths(
    examples: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    doc_stride: int,
) -> list[tuple[int, str]]:
    """``(row, problem)`` for questions too long to leave a window with more than ``doc_stride``
    context tokens (the fast tokenizer aborts the process on those, so they are caught first)."""
    specials = tokenizer.num_special_tokens_to_add(pair=True)
    budget = max_seq_length - specials - doc_stride - 1  # most question tokens that still fit
    if budget < 1:
        raise SquadDataError(
            f"data.max_seq_length={max_seq_length} leaves no room for a question: it must exceed "
            f"data.doc_stride ({doc_stride}) + {specials} special tokens + 1. Fix: raise max_seq_length or lower doc_stride"
        )
    questions = [q.lstrip() for q in examples["question"]]
    lengths = np.fromiter((len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]), dtype=np.int64)
    return [
        (int(i), f"question {examples[int(i)]['id']!r} has {lengths[i]} tokens; with max_seq_length={max_seq_length} "
                 f"and doc_stride={doc_stride} at most {budget} fit. Fix: raise data.max_seq_length or lower data.doc_stride")
        for i in np.flatnonzero(lengths > budget)
    ]


def answer_token_span(offsets: np.ndarray, context_mask: np.ndarray, start_char: int, end_char: int) -> tuple[int, int]:
    """Token span of the answer ``[start_char, end_char)`` in one window, or (0, 0) if not wholly inside.

    Args:
        offsets: [T, 2] char offsets; context_mask: [T] bool.
    """
    ctx = np.flatnonzero(context_mask)
    if ctx.size == 0 or offsets[ctx[0], 0] > start_char or offsets[ctx[-1], 1] < end_char:
        return 0, 0
    starts, ends = offsets[ctx, 0], offsets[ctx, 1]
    # Last context token starting at or before the answer; first one ending at or after it.
    start = ctx[np.searchsorted(starts, start_char, side="right") - 1]
    end = ctx[np.searchsorted(ends, end_char, side="left")]
    return int(start), int(end)


def encode_windows(
    examples: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    train: bool,
    drop_windows_without_answer: bool = False,
    chunk_size: int = 1000,
) -> list[dict[str, Any]]:
    """Tokenise every question with its context into overlapping windows.

    Each window is a dict of numpy arrays (length T_i, no padding): ``input_ids``,
    ``attention_mask``, optional ``token_type_ids``, ``context_mask`` (bool) and ints
    ``example_index`` (row in ``examples``) and ``feature_index``. Training windows add
    ``start_positions``/``end_positions`` (token indices of the first answer; 0 = [CLS] when the
    question has no answer or the answer is not wholly inside the window). Evaluation windows add
    ``offsets`` [T_i, 2] (char offsets into the context, -1 outside the context).

    Args:
        drop_windows_without_answer: training only; leave out windows labelled 0 for answerable
            questions (SQuAD v1, whose head masks [CLS] and so has no target for them).
    """
    if tokenizer.padding_side != "right":
        raise ValueError("SQuAD windows put the question first; use a tokenizer with padding_side='right'")
    features: list[dict[str, Any]] = []
    dropped = 0
    for lo in range(0, len(examples), chunk_size):
        chunk = examples[lo : lo + chunk_size]
        enc = tokenizer(
            [q.lstrip() for q in chunk["question"]],  # some SQuAD questions start with long whitespace
            chunk["context"],
            truncation="only_second",
            max_length=max_seq_length,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=False,
        )
        has_types = "token_type_ids" in enc
        for i, sample in enumerate(enc["overflow_to_sample_mapping"]):
            # float dtype turns the None of special tokens into NaN, so no per-token loop
            ctx = np.asarray(enc.sequence_ids(i), dtype=np.float64) == 1
            window: dict[str, Any] = {
                "input_ids": np.asarray(enc["input_ids"][i], dtype=np.int64),
                "attention_mask": np.asarray(enc["attention_mask"][i], dtype=np.int64),
                "context_mask": ctx,
                "example_index": lo + sample,
            }
            if has_types:
                window["token_type_ids"] = np.asarray(enc["token_type_ids"][i], dtype=np.int64)
            offsets = np.asarray(enc["offset_mapping"][i], dtype=np.int64).reshape(-1, 2)
            if train:
                answers = chunk["answers"][sample]
                if answers["text"]:
                    start_char = answers["answer_start"][0]
                    s, e = answer_token_span(offsets, ctx, start_char, start_char + len(answers["text"][0]))
                    if s == 0 and drop_windows_without_answer:
                        dropped += 1
                        continue
                else:
                    s = e = 0
                window["start_positions"], window["end_positions"] = s, e
            else:
                offsets[~ctx] = -1
                window["offsets"] = offsets
            window["feature_index"] = len(features)
            features.append(window)
    if dropped:
        log.info("left out %d training windows that do not contain their answer", dropped)
    return features


class WindowDataset(Dataset):
    """The windows of one split (a list of dicts of numpy arrays)."""

    def __init__(self, windows: list[dict[str, Any]]) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.windows[i]

    def lengths(self) -> list[int]:
        return [len(w["input_ids"]) for w in self.windows]


class WindowCollator:
    """Pad a list of windows to the batch's longest one.

    Returns a dict of tensors: [B, T] ``input_ids`` (pad id), ``attention_mask`` (0),
    ``token_type_ids`` (0), ``context_mask`` (False); [B, T, 2] ``offsets`` (-1); [B] ints.
    """

    PAD = {"attention_mask": 0, "token_type_ids": 0, "context_mask": False, "offsets": -1}

    def __init__(self, pad_token_id: int) -> None:
        self.pad = {**self.PAD, "input_ids": pad_token_id}

    def __call__(self, windows: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        longest = max(len(w["input_ids"]) for w in windows)
        batch: dict[str, torch.Tensor] = {}
        for key, value in windows[0].items():
            if isinstance(value, np.ndarray):
                out = np.full((len(windows), longest, *value.shape[1:]), self.pad[key], dtype=value.dtype)
                for row, w in enumerate(windows):
                    out[row, : len(w[key])] = w[key]
                batch[key] = torch.from_numpy(out)
            else:
                batch[key] = torch.tensor([w[key] for w in windows], dtype=torch.long)
        return batch


# DataModule ------------------------------------------------------------------------------------------

class SquadDataModule(SplitDataModule):
    """SQuAD v1.1 / v2.0 from JSON files named in ``cfg.data``.

    Keys: ``train_file``, ``validation_file``, ``test_file`` (each optional), ``max_seq_length``
    (384), ``doc_stride`` (128), ``batch_size``, ``eval_batch_size``, ``max_train_examples`` /
    ``max_eval_examples`` (first N questions; null = all), ``num_workers``,
    ``version_2_with_negative`` (unanswerable questions allowed; false), ``on_bad_example``
    (error | skip), ``drop_train_overlap`` (true: training questions whose context paragraph is
    also in the validation/test questions are left out, so partly overlapping files such as the
    CS224N and official SQuAD 2.0 dev copies cannot leak). Evaluation windows are served longest
    first and padded per batch; :meth:`examples` gives the questions that decoding and scoring need.
    """

    def __init__(self, cfg: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase) -> None:
        super().__init__()
        data = cfg["data"]
        self.data = data
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set one (e.g. tokenizer.pad_token = tokenizer.eos_token)")
        self.max_seq_length = int(config_value(data, "max_seq_length", 384))
        model_limit = getattr(tokenizer, "model_max_length", None) or 0
        if 0 < model_limit < 1_000_000 and self.max_seq_length > model_limit:  # huge = "no limit" sentinel
            raise ValueError(f"data.max_seq_length={self.max_seq_length} exceeds the encoder's {model_limit} positions. "
                             f"Fix: set data.max_seq_length <= {model_limit}; long contexts are windowed anyway")
        self.doc_stride = int(config_value(data, "doc_stride", 128))
        self.batch_size = int(config_value(data, "batch_size", 32))
        self.eval_batch_size = int(config_value(data, "eval_batch_size", self.batch_size))
        self.num_workers = int(config_value(data, "num_workers", 0))
        self.version_2 = bool(config_value(data, "version_2_with_negative", False))
        self.on_bad_example = str(config_value(data, "on_bad_example", "error"))
        self.drop_train_overlap = bool(config_value(data, "drop_train_overlap", True))
        self.collate = WindowCollator(tokenizer.pad_token_id)
        self.seed = int(config_value(cfg, "seed", 0))
        self._examples: dict[str, datasets.Dataset] = {}
        self._windows: dict[str, WindowDataset] = {}
        self.reports: dict[str, LoadReport] = {}

    FILE_KEYS = {"train": "train_file", "validation": "validation_file", "test": "test_file"}

    def has_split(self, split: str) -> bool:
        return bool(config_value(self.data, self.FILE_KEYS[split]))

    def setup(self, stage: str | None = None) -> None:
        # Evaluation splits first: the training split's overlap check reads their contexts.
        stage_splits = {"fit": ("validation", "train"), "validate": ("validation",), "test": ("test",), "predict": ("test",)}
        for split in stage_splits.get(stage or "", ("validation", "test", "train")):
            if self.has_split(split) and split not in self._windows:
                self._build(split)

    def _build(self, split: str) -> None:
        path = config_value(self.data, self.FILE_KEYS[split])
        ds, report = read_squad(path, allow_impossible=self.version_2, on_bad_example=self.on_bad_example)
        if split == "train" and self.drop_train_overlap:
            ds = self._without_eval_contexts(ds, path)
        limit = config_value(self.data, "max_train_examples" if split == "train" else "max_eval_examples")
        if limit is not None:
            ds = ds.select(range(min(int(limit), len(ds))))
        too_long = check_question_lengths(ds, self.tokenizer, self.max_seq_length, self.doc_stride)
        if too_long:
            problems = [p for _, p in too_long]
            _handle_problems(LoadReport(str(path), skipped=len(problems), problems=problems),
                             self.on_bad_example, what="questions (too long)")
            report.problems += problems
            report.skipped += len(problems)
            drop = {i for i, _ in too_long}
            ds = ds.select([i for i in range(len(ds)) if i not in drop])
        report.kept = len(ds)
        windows = encode_windows(
            ds, self.tokenizer, max_seq_length=self.max_seq_length, doc_stride=self.doc_stride,
            train=split == "train", drop_windows_without_answer=split == "train" and not self.version_2,
        )
        if not windows:
            raise SquadDataError(f"{path}: no {split} windows left (every window lacks its answer?)")
        self._examples[split], self._windows[split], self.reports[split] = ds, WindowDataset(windows), report
        log.info("%s: %d questions -> %d windows (%s)", split, len(ds), len(windows), path)

    def _without_eval_contexts(self, ds: datasets.Dataset, path: str) -> datasets.Dataset:
        """``ds`` less the questions whose context is also a context of an evaluated split."""
        eval_contexts: set[str] = set()
        for split in ("validation", "test"):
            if self.has_split(split):
                eval_contexts.update(self.examples(split)["context"])
        keep = [i for i, c in enumerate(ds["context"]) if c not in eval_contexts]
        if len(keep) < len(ds):
            log.warning("left out %d of %d training questions of %s whose paragraph is also in the evaluation "
                        "data (data.drop_train_overlap=true)", len(ds) - len(keep), len(ds), path)
            if not keep:
                raise SquadDataError(f"{path}: every training paragraph is also in the evaluation data. "
                                     "Fix: use a separate training file, or set data.drop_train_overlap=false")
            ds = ds.select(keep)
        return ds

    def examples(self, split: str) -> datasets.Dataset:
        """The questions of ``split`` ("validation" / "test"), row = ``example_index`` of its windows."""
        if split not in self._examples:
            self._build(split)
        return self._examples[split]

    def windows(self, split: str) -> WindowDataset:
        if split not in self._windows:
            self._build(split)
        return self._windows[split]

    def _loader(self, split: str, train: bool) -> DataLoader:
        ds = self.windows(split)
        return make_loader(
            ds, train=train, batch_size=self.batch_size if train else self.eval_batch_size, collate_fn=self.collate,
            num_workers=self.num_workers, lengths=None if train else ds.lengths(), seed=self.seed, resume_at=self.resume_at,
        )
