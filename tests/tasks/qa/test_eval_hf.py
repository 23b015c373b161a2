"""sesame-eval on a Hugging Face ``BertForQuestionAnswering`` folder: files, and the same logits as transformers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sesame.tasks.evaluation import evaluate
from sesame.tasks.qa.metrics import gold_from_dataset, squad_v1
from sesame.tasks.qa.module import SquadModule
from sesame.tasks.qa.predictions import decode_predictions
from sesame.tasks.qa.readers import read_squad


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
    metrics = evaluate(cfg, tmp_path / "eval")

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

    from sesame.tasks.encoder import Encoder

    encoder = Encoder(str(hf_qa_dir)).eval()
    reference = BertModel.from_pretrained(hf_qa_dir, add_pooling_layer=False).eval()
    ids = torch.tensor([[2, 40, 41, 3, 50, 51, 52, 3]])
    mask, types = torch.ones_like(ids), torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        got = encoder(ids, mask, types)[-1]
        assert not torch.allclose(got, encoder(ids, mask, torch.zeros_like(types))[-1])
        want = reference(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(got, want)
