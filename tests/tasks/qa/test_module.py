"""SquadModule end to end with the tiny random BERT: train, decode, score, write files, reload; and
sesame-eval on a Hugging Face ``BertForQuestionAnswering`` folder (the same logits as transformers)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.cli.score import main as score_main
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.qa.metrics import exact_match_score, gold_from_dataset, squad_v1
from sesame.tasks.qa.module import SquadModule
from sesame.tasks.qa.predictions import decode_predictions
from sesame.tasks.qa.readers import read_squad
from sesame.tasks.runs.runner import build_datamodule, train
from tests.heads.test_calibration import ece_by_loop

SMALL = [
    "data.max_seq_length=96", "data.doc_stride=32",  # several windows per dev question
    "data.batch_size=8", "data.eval_batch_size=16",
    "trainer.limit_val_batches=null", "trainer.limit_test_batches=null",  # decode every window
]


def _score_cli(capsys, *args) -> dict:
    capsys.readouterr()  # drop what the run printed
    assert score_main([str(a) for a in args]) == 0
    return json.loads(capsys.readouterr().out)


def _dev_subset(path: str, ids: set[str], out: Path) -> Path:
    """The gold file restricted to the evaluated questions (for sesame-score)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    for article in data["data"]:
        for para in article["paragraphs"]:
            para["qas"] = [q for q in para["qas"] if q["id"] in ids]
    out.write_text(json.dumps(data), encoding="utf-8")
    return out


def test_squad_v1_train_eval_files_and_checkpoint(make_cfg, tmp_path, capsys):
    cfg = make_cfg("task=squad_v1", "data=squad_v1_slice", *SMALL, "data.max_train_examples=40",
                   "data.max_eval_examples=24", "data.test_file=${data.validation_file}")
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(cfg), run)
    assert json.loads((run / "metrics.json").read_text()) == metrics
    # The test file is the dev file: the same answers and scores under the test_ names.
    assert (run / "test_predictions.json").read_text() == (run / "predictions.json").read_text()
    assert {k[5:]: v for k, v in metrics.items() if k.startswith("test_")} == {k[4:]: v for k, v in metrics.items() if k.startswith("val_")}

    preds = json.loads((run / "predictions.json").read_text())
    nbest = json.loads((run / "nbest_predictions.json").read_text())
    assert not (run / "null_odds.json").exists()
    gold_all = gold_from_dataset(json.loads(Path(cfg.data.validation_file).read_text()))
    dev_ids = list(gold_all)[:24]
    assert list(preds) == dev_ids or sorted(preds) == sorted(dev_ids)  # every evaluated question, once
    contexts = {q["id"]: p["context"] for a in json.loads(Path(cfg.data.validation_file).read_text())["data"]
                for p in a["paragraphs"] for q in p["qas"]}
    for qid, answer in preds.items():
        assert answer and answer in contexts[qid]
        ranked = nbest[qid]
        assert ranked[0]["text"] == answer and 1 <= len(ranked) <= 20
        assert [c["score"] for c in ranked] == sorted((c["score"] for c in ranked), reverse=True)
        assert sum(c["probability"] for c in ranked) == pytest.approx(1.0)
        assert all(contexts[qid][c["char_start"]:c["char_end"]] == c["text"] for c in ranked)

    # The logged metrics are the official ones on the written predictions (also via sesame-score).
    gold = {qid: gold_all[qid] for qid in preds}
    assert squad_v1(gold, preds) == pytest.approx({"exact_match": metrics["val_exact_match"], "f1": metrics["val_f1"]})
    subset = _dev_subset(cfg.data.validation_file, set(preds), tmp_path / "dev.json")
    cli = _score_cli(capsys, "squad_v1", run / "predictions.json", subset)
    assert cli == pytest.approx({"exact_match": metrics["val_exact_match"], "f1": metrics["val_f1"]})
    assert (run / "test_predictions.json").is_file()
    # ECE of the answers' n-best probabilities against exact match, from the written files.
    confidence = [next(c["probability"] for c in nbest[q] if c["text"] == preds[q]) for q in preds]
    correct = [max(exact_match_score(preds[q], g) for g in gold[q]) for q in preds]
    assert metrics["val_ece"] == pytest.approx(ece_by_loop(confidence, correct), abs=1e-9)

    # The checkpoint rebuilds the module; training moved the head away from its seeded init.
    ckpt = run / "checkpoints" / "best.ckpt"
    module = load_trained(ckpt).module
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    torch.testing.assert_close(module.head.qa_outputs.weight, state["head.qa_outputs.weight"])
    L.seed_everything(int(cfg.seed), verbose=False)
    fresh = SquadModule(RunSettings.from_config(cfg))
    assert not torch.equal(fresh.head.qa_outputs.weight, module.head.qa_outputs.weight)
    # v1 trains on every window by default, those without the answer pointing at [CLS]: the head keeps it
    assert cfg.data.train_windows == "all" and module.head.allow_null


def test_squad_v2_null_odds_and_scores(make_cfg, tmp_path, capsys):
    cfg = make_cfg(
        "task=squad_v2", "data=squad_v2", *SMALL,
        "data.train_file=${shipped:squad_v2/dev.slice.json}", "data.validation_file=${shipped:squad_v2/dev.slice.json}",
        "data.drop_train_overlap=false", "data.max_eval_examples=30", "head.null_score_diff_threshold=0.5",
        "data.max_seq_length=192",  # the tiny 400-piece vocabulary makes some questions 70+ tokens
    )
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(cfg), run)
    for key in ("exact_match", "f1", "HasAns_f1", "NoAns_exact", "best_f1", "best_f1_thresh", "HasAns_total"):
        assert f"val_{key}" in metrics, key
    assert metrics["val_HasAns_total"] + metrics["val_NoAns_total"] == 30
    written = json.loads((run / "metrics.json").read_text())
    assert type(written["val_NoAns_total"]) is int and type(written["val_total"]) is int  # counts stay integers
    preds = json.loads((run / "predictions.json").read_text())
    odds = json.loads((run / "null_odds.json").read_text())
    assert set(preds) == set(odds) and len(preds) == 30
    for qid, answer in preds.items():
        assert (answer == "") == (odds[qid] > 0.5)
        nbest = json.loads((run / "nbest_predictions.json").read_text())[qid]
        assert sum(c["text"] == "" and c["char_start"] == -1 for c in nbest) == 1  # the null entry
    subset = _dev_subset(cfg.data.validation_file, set(preds), tmp_path / "dev.json")
    cli = _score_cli(capsys, "squad_v2", run / "predictions.json", subset,
                     "--na-prob-file", run / "null_odds.json", "--na-prob-thresh", "0.5")
    for key, value in cli.items():
        assert metrics[f"val_{key}"] == pytest.approx(value), key

    # Re-evaluate the checkpoint with the threshold at the median null odds: now both kinds occur.
    module = load_trained(run / "checkpoints" / "last.ckpt").module
    assert module.head.allow_null
    median = sorted(odds.values())[len(odds) // 2]
    module.decoding = dataclasses.replace(module.decoding, null_score_diff_threshold=median)
    module.output_dir = tmp_path / "rethresholded"
    module.output_dir.mkdir()
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    again = trainer.validate(module, datamodule=build_datamodule(RunSettings.from_config(cfg)), verbose=False)[0]
    preds2 = json.loads((module.output_dir / "predictions.json").read_text())
    odds2 = json.loads((module.output_dir / "null_odds.json").read_text())
    assert odds2 == pytest.approx(odds)
    assert {qid: (a == "") for qid, a in preds2.items()} == {qid: odds[qid] > median for qid in preds2}
    assert 0 < sum(a == "" for a in preds2.values()) < len(preds2)
    assert again["val_NoAns_total"] == metrics["val_NoAns_total"]


def test_evaluation_needs_the_datamodule(make_cfg):
    module = SquadModule(RunSettings.from_config(make_cfg("task=squad_v1", "data=squad_v1_slice")))
    module._eval_rows["val"] = [{"feature_index": np.array([0]), "example_index": np.array([0]), "start": np.zeros((1, 4)),
                                 "end": np.zeros((1, 4)), "offsets": np.full((1, 4, 2), -1, dtype=np.int32)}]
    with pytest.raises(RuntimeError, match="needs its data module"):
        module.on_validation_epoch_end()


def test_task_configs_pick_their_data_presets(make_cfg):
    v1 = make_cfg("task=squad_v1")
    assert v1.task.module == "sesame.tasks.qa.module.SquadModule" and v1.task.main_metric == "val_f1"
    assert v1.data.train_file.endswith("squad_v1/train.slice.json") and not v1.data.version_2_with_negative
    assert (v1.data.max_seq_length, v1.data.doc_stride, v1.head.n_best_size, v1.head.max_answer_length) == (384, 128, 20, 30)
    v2 = make_cfg("task=squad_v2")
    assert v2.data.version_2_with_negative and v2.data.drop_train_overlap
    assert v2.data.validation_file.endswith("squad_v2/dev.slice.json")  # shipped, as v1's
    full = make_cfg("task=squad_v2", "data=squad_v2")
    assert full.data.validation_file.endswith("squad_v2.0/dev-v2.0.first5articles.json") and full.data.version_2_with_negative


# sesame-eval on a Hugging Face BertForQuestionAnswering folder (SquadModule.load_hf_head) ------------------


@pytest.fixture(scope="module")
def hf_qa_dir(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoTokenizer, BertForQuestionAnswering

    folder = tmp_path_factory.mktemp("hf_qa")
    torch.manual_seed(1)
    model = BertForQuestionAnswering.from_pretrained(tiny_bert_dir)
    # Spread the head's logits: with the default small init every span would score about the same.
    torch.nn.init.normal_(model.qa_outputs.weight, std=1.0)
    torch.nn.init.normal_(model.qa_outputs.bias, std=1.0)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    return folder


def test_hf_qa_folder_evaluates_with_transformers_logits(make_cfg, hf_qa_dir, tmp_path, monkeypatch):
    from transformers import BertForQuestionAnswering

    seen: list[tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]] = []
    forward = SquadModule.forward

    def recording_forward(self: SquadModule, batch):
        start, end = forward(self, batch)
        seen.append(({k: v.clone() for k, v in batch.items()}, start.detach().clone(), end.detach().clone()))
        return start, end

    monkeypatch.setattr(SquadModule, "forward", recording_forward)
    cfg = make_cfg("task=squad_v1", f"++model={hf_qa_dir}", "data.max_eval_examples=20")
    metrics = evaluate(RunSettings.from_config(cfg), tmp_path / "eval")

    assert json.loads((tmp_path / "eval" / "metrics.json").read_text()) == metrics
    predictions = json.loads((tmp_path / "eval" / "predictions.json").read_text())
    assert len(predictions) == 20
    # The scores are the official ones of the written answers against the dev file's gold answers.
    gold = gold_from_dataset(json.loads(Path(cfg.data.validation_file).read_text(encoding="utf-8")))
    official = squad_v1({qid: gold[qid] for qid in predictions}, predictions)
    assert {"exact_match": metrics["val_exact_match"], "f1": metrics["val_f1"]} == pytest.approx(official, rel=1e-9)
    assert official["f1"] > 0  # some overlap: a mix-up of questions and answers would show

    reference = BertForQuestionAnswering.from_pretrained(hf_qa_dir).eval()
    assert seen, "the module never ran"
    ref_start, ref_end = [], []
    for batch, start, end in seen:
        with torch.no_grad():
            out = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            token_type_ids=batch["token_type_ids"])
        ctx = batch["context_mask"]  # sesame masks everything but the context; compare where it scores
        assert ctx.any()
        torch.testing.assert_close(start[ctx], out.start_logits[ctx], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(end[ctx], out.end_logits[ctx], rtol=1e-5, atol=1e-5)
        ref_start.append(out.start_logits.masked_fill(~ctx, -1e4))
        ref_end.append(out.end_logits.masked_fill(~ctx, -1e4))

    # The written answers are what transformers' logits decode to.
    assert len(seen) == 1  # 20 questions, one evaluation batch: no cross-batch padding to undo
    batch = seen[0][0]
    rows, _ = read_squad(cfg.data.validation_file, allow_impossible=False)
    rows = rows.select(range(20))
    ref = decode_predictions(ref_start[0], ref_end[0], batch["offsets"], batch["example_index"],
                             list(rows["context"]), list(rows["id"]))
    assert predictions == {qid: p.text for qid, p in ref.items()}


def test_encoder_passes_segment_ids(hf_qa_dir):
    """Regression: transformers 5 wraps ``forward`` so its code object shows only (*args, **kwargs); the
    encoder must still hand BERT the token types, or every pair input is read as segment 0."""
    from transformers import BertModel

    from sesame.tasks.encoders.encoder import Encoder

    encoder = Encoder(str(hf_qa_dir)).eval()
    reference = BertModel.from_pretrained(hf_qa_dir, add_pooling_layer=False).eval()
    ids = torch.tensor([[2, 40, 41, 3, 50, 51, 52, 3]])
    mask, types = torch.ones_like(ids), torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        got = encoder(ids, mask, types)[-1]
        assert not torch.allclose(got, encoder(ids, mask, torch.zeros_like(types))[-1])
        want = reference(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(got, want)
