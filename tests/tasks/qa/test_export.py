"""QuestionAnsweringExport (tasks/qa/export.py): probes are the first windows of tasks/qa/windows.py,
outputs are compared where the module does not mask, a prediction is the best start and end."""

from __future__ import annotations

import datasets
import pytest
import torch

from sesame.heads.masking import masked_value
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.encoder import load_tokenizer
from sesame.tasks.qa.export import PROBES, QuestionAnsweringExport
from sesame.tasks.qa.windows import encode_windows


def _settings(make_cfg, *overrides):
    return RunSettings.from_config(make_cfg("task=squad_v1", *overrides))


def test_each_probe_is_its_first_window_with_the_context_mask(make_cfg, tiny_bert_dir):
    tokenizer = load_tokenizer(str(tiny_bert_dir))
    export = QuestionAnsweringExport(_settings(make_cfg, "data.max_seq_length=24", "data.doc_stride=4"))
    batch = export.probe_batch(tokenizer, (1, 0))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "context_mask"}
    assert batch["context_mask"].dtype == torch.bool and not batch["context_mask"][:, 0].any()
    examples = datasets.Dataset.from_dict({"question": [PROBES[1][0]], "context": [PROBES[1][1]]})
    windows = encode_windows(examples, tokenizer, max_seq_length=24, doc_stride=4, train=False)
    assert len(windows) > 1  # the context of probe 1 needs several windows: the probe keeps the first
    assert batch["input_ids"].shape[0] == 2
    assert batch["input_ids"][0].tolist() == windows[0]["input_ids"].tolist()
    assert batch["context_mask"][0].tolist() == windows[0]["context_mask"].tolist()


def test_a_question_longer_than_a_window_allows_is_a_config_error(make_cfg, tiny_bert_dir):
    export = QuestionAnsweringExport(_settings(make_cfg, "data.max_seq_length=12", "data.doc_stride=4"))
    with pytest.raises(ConfigError, match="probe 3"):
        export.probe_batch(load_tokenizer(str(tiny_bert_dir)), (3,))


def test_outputs_count_where_unmasked_and_a_prediction_is_the_best_span(make_cfg, tmp_path):
    export = QuestionAnsweringExport(_settings(make_cfg))
    start = torch.tensor([[masked_value(torch.float32), 1.0, 3.0], [masked_value(torch.float32), 2.0, 0.5]])
    end = torch.tensor([[masked_value(torch.float32), 4.0, 3.0], [masked_value(torch.float32), 0.0, 0.5]])
    assert export.compared_positions(start, {}).tolist() == [[False, True, True], [False, True, True]]
    assert export.predictions((start, end), {}).tolist() == [[2, 1], [1, 2]]
    assert export.forward_output((start, end)) == (start, end)  # the module's (start, end)
    assert export.report_labels(None) is None and export.data_rows() == [("doc stride", 128)]
    assert export.decoding_state(tmp_path) == {}  # nothing beside the graph: spans decode from the logits
