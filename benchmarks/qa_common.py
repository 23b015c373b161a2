"""Shared pieces of the QA benchmarks (qa_pipeline_parity.py, qa_speed.py): model folders that both
sides load, real SQuAD dev questions, sesame's evaluation path with model loading kept apart, and
the transformers 4.x pipeline in its own interpreter (qa_tf4_pipeline_worker.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import datasets  # noqa: E402
import torch  # noqa: E402
from sesame.tasks.base.run_settings import RunSettings

BENCHMARKS = Path(__file__).resolve().parent
WORKER = BENCHMARKS / "qa_tf4_pipeline_worker.py"
DEFAULT_TF4_PYTHON = "/work/venv-tf4/bin/python"
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# The pipeline call that matches sesame's decoding settings (max_answer_length 30, no null answer,
# raw offsets instead of snapping to whole words).
PIPELINE_KWARGS = {"max_seq_len": 384, "doc_stride": 128, "max_answer_len": 30, "align_to_words": False,
                   "top_k": 1, "handle_impossible_answer": False}


def tf4_python() -> str | None:
    """The interpreter with transformers 4.x: ``$SESAME_TF4_PYTHON`` (a python executable or a venv
    folder), else /work/venv-tf4; None when neither exists."""
    candidate = os.environ.get("SESAME_TF4_PYTHON") or DEFAULT_TF4_PYTHON
    path = Path(candidate)
    if path.is_dir():
        path = path / "bin" / "python"
    return str(path) if path.is_file() else None


def default_dev_file() -> Path:
    from sesame.tasks.core.paths import data_dir_path

    return Path(data_dir_path("squad_v1.1/dev-v1.1.json"))


# Model folders ---------------------------------------------------------------------------------------
def minilm_path() -> Path:
    from sesame.tasks.encoders.encoder import resolve_name_or_path

    return Path(resolve_name_or_path("minilm_l6"))


def copy_tokenizer(source: Path, folder: Path) -> None:
    """The encoder's own tokenizer files, byte for byte, so both transformers versions read the same."""
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, folder / name)


def build_minilm_qa(folder: Path, seed: int = 0) -> Path:
    """MiniLM-L6 with a seeded random ``qa_outputs``, saved as a ``BertForQuestionAnswering`` folder."""
    from transformers import BertForQuestionAnswering

    model = BertForQuestionAnswering.from_pretrained(minilm_path())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # BERT's own init (std = initializer_range), but from our seed
        model.qa_outputs.weight.copy_(torch.randn(model.qa_outputs.weight.shape, generator=generator) * model.config.initializer_range)
        model.qa_outputs.bias.zero_()
    model.save_pretrained(folder)
    copy_tokenizer(minilm_path(), folder)
    return folder


def build_tiny_qa(folder: Path, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    """A tiny random ``BertForQuestionAnswering`` over MiniLM's real 30,522-word vocabulary and tokenizer."""
    from transformers import BertConfig, BertForQuestionAnswering

    base = BertConfig.from_pretrained(minilm_path())
    config = BertConfig(vocab_size=base.vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=base.max_position_embeddings)
    torch.manual_seed(seed)
    BertForQuestionAnswering(config).save_pretrained(folder)
    copy_tokenizer(minilm_path(), folder)
    return folder


# Questions -------------------------------------------------------------------------------------------
def dev_questions(path: Path, n: int | None = None, windows: str = "any", tokenizer: Any = None,
                  max_seq_length: int = 384, doc_stride: int = 128) -> datasets.Dataset:
    """The first ``n`` questions of a SQuAD v1.1 file (sesame's reader), optionally only those whose
    context fits one window (``windows="single"``) or needs several (``"multi"``)."""
    from sesame.tasks.qa.readers import read_squad
    from sesame.tasks.qa.windows import encode_windows

    rows, _ = read_squad(path, allow_impossible=False)
    if windows != "any":
        feats = encode_windows(rows, tokenizer, max_seq_length=max_seq_length, doc_stride=doc_stride, train=False)
        count = [0] * len(rows)
        for f in feats:
            count[f["example_index"]] += 1
        keep = [i for i, c in enumerate(count) if (c == 1) == (windows == "single")]
        rows = rows.select(keep)
    return rows.select(range(min(n, len(rows)))) if n is not None else rows


def write_squad(rows: datasets.Dataset, path: Path) -> Path:
    """A SQuAD v1.1 file of these questions (one paragraph each, in order)."""
    paragraphs = [
        {"context": r["context"], "qas": [{"id": r["id"], "question": r["question"], "answers": [
            {"text": t, "answer_start": s} for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"])]}]}
        for r in rows
    ]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "benchmark", "paragraphs": paragraphs}]}), encoding="utf-8")
    return path


# sesame ----------------------------------------------------------------------------------------------
@dataclass
class Answer:
    text: str
    start: int
    end: int


class SesameQA:
    """sesame-eval on a ``...ForQuestionAnswering`` folder, split into loading (once) and evaluating a
    SQuAD file (timed): the same calls as ``tasks/runs/evaluation.py`` ``evaluate``."""

    def __init__(self, folder: Path, batch_size: int = 16, max_seq_length: int = 384, doc_stride: int = 128) -> None:
        from hydra import compose, initialize_config_module
        from hydra.core.global_hydra import GlobalHydra

        from sesame.tasks.encoders.encoder import load_tokenizer
        from sesame.tasks.encoders.encoder_settings import EncoderSettings
        from sesame.tasks.cli.resolvers import register_resolvers
        from sesame.tasks.qa.module import SquadModule

        register_resolvers()
        GlobalHydra.instance().clear()
        overrides = [
            "task=squad_v1", f"encoder.name_or_path={folder}", "data.train_file=null",
            f"data.eval_batch_size={batch_size}", f"data.max_seq_length={max_seq_length}", f"data.doc_stride={doc_stride}",
            "head.n_best_size=20", "head.max_answer_length=30",
            "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
        ]
        with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
            self.cfg = compose(config_name="config", overrides=overrides)
        self.tokenizer = load_tokenizer(EncoderSettings.from_config(self.cfg.encoder))
        self.module = SquadModule(RunSettings.from_config(self.cfg))
        self.module.load_hf_head(folder)
        self.module.eval()

    def predict(self, squad_json: Path, run_dir: Path) -> tuple[float, dict[str, Answer]]:
        """Evaluate ``squad_json`` as sesame-eval does (read, tokenise, forward, decode, score, write
        predictions/nbest/metrics); returns (seconds, answers with char offsets from the nbest file)."""
        from omegaconf import OmegaConf

        from sesame.tasks.runs.runner import build_datamodule
        from sesame.tasks.runs.runner import build_trainer, finish_run, flat_metrics

        run_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        cfg = OmegaConf.merge(self.cfg, {"data": {"validation_file": str(squad_json)}})
        datamodule = build_datamodule(RunSettings.from_config(cfg), self.tokenizer)
        datamodule.setup("validate")
        self.module.output_dir = run_dir
        trainer = build_trainer(RunSettings.from_config(cfg), run_dir, monitor=None)
        metrics = flat_metrics(trainer.validate(self.module, datamodule=datamodule, verbose=False))
        with contextlib.redirect_stdout(io.StringIO()):  # finish_run also prints the metrics
            finish_run(self.module, metrics, run_dir)
        seconds = time.perf_counter() - start
        nbest = json.loads((run_dir / "nbest_predictions.json").read_text(encoding="utf-8"))
        return seconds, {qid: Answer(e[0]["text"], e[0]["char_start"], e[0]["char_end"]) for qid, e in nbest.items()}

    def floor_batches(self, squad_json: Path, batch_size: int) -> list[dict[str, torch.Tensor]]:
        """The evaluation windows of ``squad_json``, longest first, padded per batch (built untimed)."""
        from sesame.tasks.inputs.batching import LengthSortedSampler
        from sesame.tasks.qa.readers import read_squad
        from sesame.tasks.qa.windows import encode_windows, window_collator

        rows, _ = read_squad(squad_json, allow_impossible=False)
        windows = encode_windows(rows, self.tokenizer, max_seq_length=int(self.cfg.data.max_seq_length),
                                 doc_stride=int(self.cfg.data.doc_stride), train=False)
        order = list(LengthSortedSampler([len(w["input_ids"]) for w in windows]))
        collate = window_collator(self.tokenizer.pad_token_id)
        return [collate([windows[i] for i in order[lo : lo + batch_size]]) for lo in range(0, len(order), batch_size)]

    def floor(self, batches: Iterable[dict[str, torch.Tensor]]) -> float:
        """Seconds of the encoder alone over ``batches``: the forward-pass floor of any QA evaluation."""
        encoder = self.module.encoder.eval()
        start = time.perf_counter()
        with torch.inference_mode():
            for b in batches:
                encoder(b["input_ids"], b["attention_mask"], b.get("token_type_ids"))
        return time.perf_counter() - start


# transformers 4.x ------------------------------------------------------------------------------------
class PipelineWorker:
    """The 4.x ``pipeline("question-answering")`` in ``python`` (transformers < 5), model loaded once."""

    def __init__(self, python: str, folder: Path, threads: int = 0) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": ""}  # nothing of sesame's venv leaks in
        self.proc = subprocess.Popen(
            [python, str(WORKER), "--model", str(folder), "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env=env,
        )
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise RuntimeError(f"the transformers 4.x worker exited (code {self.proc.wait()}); see its messages above")

    def predict(self, squad_json: Path, batch_size: int, **kwargs: Any) -> tuple[float, dict[str, Answer | None]]:
        """(seconds spent reading the file and running the pipeline, in the worker; answers by id)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"squad_json": str(squad_json), "batch_size": batch_size,
                                          "kwargs": {**PIPELINE_KWARGS, **kwargs}}) + "\n")
        self.proc.stdin.flush()
        out = self._read()
        preds = {qid: (Answer(p["answer"], p["start"], p["end"]) if p else None) for qid, p in out["predictions"].items()}
        return out["seconds"], preds

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)

    def __enter__(self) -> PipelineWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
