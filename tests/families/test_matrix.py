"""The encoder-family matrix: every family of ``builders.FAMILY_SPECS`` x every feature of ``cells.FEATURES``.

Each family trains three tiny runs (``conftest.py``, settings in ``cells.RUN_SETTINGS``): a GLUE
sentence-pair task (scalar mix, frozen), SQuAD v2 (second-to-last layer, full) and NER (last layer,
top_k; full where top_k is refused), each evaluated and used for prediction; the NER run is also
cut down (drop-layers) and exported. Each test computes one cell's outcome from what happened,
records it, and asserts it is the declared one (``cells.DECLARED``); a ``no`` is the ConfigError
sesame raises.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.inputs.batching import PaddingCollator
from sesame.tasks.saved.checkpoints import TrainedModel, load_trained
from sesame.tasks.encoders.encoder import Encoder, encoder_inputs, load_tokenizer
from sesame.tasks.encoders.families import family_of, pooler_linear
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.inference.predictor import Predictor
from tests.families.builders import FAMILY_SPECS
from tests.families.cells import DECLARED, reason_of

FAMILIES = list(FAMILY_SPECS)
TASK_FEATURE = {"glue": "glue_pair", "squad_v2": "squad_v2", "ner": "ner"}
MAIN_METRIC = {"glue": "val_accuracy", "squad_v2": "val_f1", "ner": "val_f1"}
INPUTS = {
    "glue": [{"text": "a gripping , beautifully shot film", "text_pair": "the film is gripping"},
             {"text": "not good at all", "text_pair": "it was bad"}],
    "squad_v2": [{"question": "Who won the prize?", "context": "Marie Curie won the Nobel Prize in Physics in 1903."},
                 {"question": "When?", "context": "In 1911."}],
    "ner": [{"text": "Marie Curie lived in Paris."}, {"tokens": ["@user", "going", "to", "New", "York", "!"]}],
}


@pytest.fixture(scope="session")
def trained(family_run: Callable[[str, str], tuple[Path, dict]]) -> Callable[[str, str], TrainedModel]:
    """``trained(name, task)``: the family's run of ``task`` read back as sesame reads it (once each)."""
    cache: dict[tuple[str, str], TrainedModel] = {}

    def get(name: str, task: str) -> TrainedModel:
        if (name, task) not in cache:
            cache[name, task] = load_trained(family_run(name, task)[0])
        return cache[name, task]

    return get


def trained_config(run: Path) -> object:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(run / "encoder")


def check(record: Callable[[str, str, str], None], name: str, feature: str, cell: str) -> None:
    record(name, feature, cell)
    assert cell == DECLARED[name][feature]


def refusal(err: ConfigError) -> str:
    return "no: " + reason_of(str(err))


# Tasks ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("task", list(TASK_FEATURE))
@pytest.mark.parametrize("name", FAMILIES)
def test_each_task_trains_evaluates_and_predicts(name, task, family_run, record):
    run, metrics = family_run(name, task)
    assert metrics["val_examples_scored"] > 0 and metrics[MAIN_METRIC[task]] is not None
    assert metrics.get("val_loss") is None or metrics["val_loss"] > 0
    outputs = Predictor.from_run(run)(INPUTS[task])
    assert len(outputs) == len(INPUTS[task])
    key = {"glue": "label", "squad_v2": "answer", "ner": "entities"}[task]
    assert all(key in out for out in outputs)
    cell = "yes"
    if task == "squad_v2":
        tokenizer = load_tokenizer(str(run / "encoder"))
        first = tokenizer("Who won?", "Marie Curie won.")["input_ids"][0]
        if first not in tokenizer.all_special_ids:  # XLNet's <cls> ends the input; T5 has none
            cell = "yes (no-answer pointer: the question's first token)"
    check(record, name, TASK_FEATURE[task], cell)


@pytest.mark.parametrize("name", FAMILIES)
def test_pair_inputs_reach_the_model(name, trained, record):
    """Both texts of a pair are in the input; segment ids reach the model where it embeds them (and
    change its output), and are left out where it does not (RoBERTa's single segment embedding)."""
    model = trained(name, "glue")
    module, tokenizer = model.module, model.tokenizer()
    enc = tokenizer(["a gripping film", "not good"], ["it was good", "bad"])
    assert all({0, 1} <= set(enc.sequence_ids(i)) for i in range(2))
    batch = PaddingCollator({"input_ids": tokenizer.pad_token_id})([{k: enc[k][i] for k in enc} for i in range(2)])
    segments = "token_type_ids" in batch and bool(batch["token_type_ids"].any()) and module.encoder.takes_token_types
    if segments:
        with torch.inference_mode():  # the hidden states (a tiny random XLNet's segment effect is ~1e-5)
            as_given = module.encoder(**encoder_inputs(batch))[-1]
            one_segment = module.encoder(**encoder_inputs({**batch, "token_type_ids": torch.zeros_like(batch["token_type_ids"])}))[-1]
        assert not torch.equal(as_given, one_segment)
    check(record, name, "pair_inputs", "yes (segment ids)" if segments else "yes (separators only)")


@pytest.mark.parametrize("name", FAMILIES)
def test_every_fusion_mode_trains(name, trained, record):
    modes = {task: trained(name, task).module.fusion.mode for task in TASK_FEATURE}
    assert sorted(modes.values()) == ["last", "scalar_mix", "second_to_last"]
    mix = trained(name, "glue").module.fusion.scalar_mix
    assert mix is not None and len(mix.scalar_parameters) == trained(name, "glue").module.encoder.num_hidden_states
    check(record, name, "fusion", "yes")


# Fine-tuning ---------------------------------------------------------------------------------------
def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


@pytest.mark.parametrize("name", FAMILIES)
def test_top_k_trains_only_the_top_layers(name, trained, family_cfg, family_dir, record):
    from sesame.tasks.ner.module import NerModule

    try:
        NerModule(RunSettings.from_config(family_cfg(name, "ner", "finetune=top_k", "finetune.top_k=1")))
    except ConfigError as err:
        cell = refusal(err)
    else:
        model = trained(name, "ner")
        assert model.cfg["finetune"]["mode"] == "top_k"
        pretrained = Encoder(str(family_dir(name)))
        layers, before = model.module.encoder.layers(), pretrained.layers()
        assert _same(layers[0], before[0]) and not _same(layers[-1], before[-1])
        assert _same(model.module.encoder.model.get_input_embeddings(), pretrained.model.get_input_embeddings())
        # The frozen run's encoder is the pretrained one, bit for bit (its digest was checked on loading).
        assert _same(trained(name, "glue").module.encoder.model.get_input_embeddings(), pretrained.model.get_input_embeddings())
        cell = "yes"
    check(record, name, "top_k", cell)


@pytest.mark.parametrize("name", FAMILIES)
def test_drop_layers_makes_a_student_that_predicts(name, family_run, tmp_path, record):
    from sesame.tasks.compression.drop_layers import drop_layers

    run, _ = family_run(name, "ner")
    note = ""
    try:
        report = drop_layers(run, tmp_path / "student", keep="every_other")
    except ConfigError as err:
        if "keep layer 0" not in str(err):
            check(record, name, "drop_layers", refusal(err))
            return
        note = f" (keeping layer 0: {reason_of(str(err))})"
        report = drop_layers(run, tmp_path / "student0", keep="bottom", num_keep=1)
    assert report["num_layers"] == 1
    student = load_trained(report["checkpoint"])
    assert student.module.encoder.num_hidden_states == 2
    assert len(Predictor.from_run(report["checkpoint"])(INPUTS["ner"])) == 2
    check(record, name, "drop_layers", "yes" + note)


# Pooling -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_cls_pooling_reads_the_summary_token(name, trained, family_cfg, record):
    from sesame.tasks.glue.module import SentenceClassificationModule

    try:
        module = SentenceClassificationModule(RunSettings.from_config(family_cfg(name, "glue", "pooling=cls")))
    except ConfigError as err:
        check(record, name, "cls", refusal(err))
        return
    where = module.pooling.summary_token
    tokenizer = trained(name, "glue").tokenizer()
    enc = tokenizer(["a gripping film", "bad"], ["it was good", "it was not good at all"])
    for ids in enc["input_ids"]:  # the token it reads is the family's [CLS]
        assert ids[0 if where == "first" else -1] == tokenizer.cls_token_id
    features = torch.randn(2, 5, 3)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    pooled = module.pooling(features, mask)
    torch.testing.assert_close(pooled, features[[0, 1], [0, 0]] if where == "first" else features[[0, 1], [4, 2]])
    check(record, name, "cls", "yes (the first token)" if where == "first" else "yes (the last token, <cls>)")


@pytest.mark.parametrize("name", FAMILIES)
def test_pooler_pooling_starts_from_the_pretrained_pooler(name, family_cfg, family_dir, record):
    from sesame.tasks.glue.module import SentenceClassificationModule

    try:
        module = SentenceClassificationModule(RunSettings.from_config(family_cfg(name, "glue", "pooling=pooler")))
    except ConfigError as err:
        check(record, name, "pooler", refusal(err))
        return
    dense = pooler_linear(Encoder(str(family_dir(name))).model)
    torch.testing.assert_close(module.pooling.dense.weight, dense.weight, rtol=0, atol=0)
    assert module.encoder.model.pooler is None  # the head's copy is what trains
    check(record, name, "pooler", "yes")


# Export --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_export_hf(name, family_run, tmp_path, record):
    """The NER run (fusion=last, argmax tagging) as transformers' token classifier, where it is one
    (export_hf itself checks the written model gives sesame's logits)."""
    from sesame.tasks.export.hf import export_hf

    try:
        report = export_hf(family_run(name, "ner")[0], tmp_path / "hf")
    except ConfigError as err:
        cell = refusal(err)
    else:
        assert report["max_abs_diff"] <= 1e-4 and (tmp_path / "hf" / "config.json").is_file()
        cell = "yes"
    check(record, name, "export_hf", cell)


@pytest.mark.parametrize("name", FAMILIES)
def test_export_onnx(name, family_run, tmp_path, record):
    """The NER run as an ONNX graph (the torchscript exporter here: the dynamo one takes seconds more
    per model); export_onnx checks onnxruntime's outputs against PyTorch's at other batch sizes and lengths."""
    pytest.importorskip("onnxruntime")
    from sesame.tasks.export.onnx import export_onnx

    run = family_run(name, "ner")[0]
    note = ""
    family = family_of(trained_config(run))
    try:
        if family.onnx_unsupported or family.dynamo_unsupported:  # refused before any export: cheap
            export_onnx(run, tmp_path / "dynamo", exporter="dynamo")
    except ConfigError as err:
        if "--exporter torchscript" not in str(err):
            check(record, name, "export_onnx", refusal(err))
            return
        note = f" (--exporter torchscript only: {reason_of(str(err))})"
    report = export_onnx(run, tmp_path / "onnx", exporter="torchscript")
    assert report["max_abs_diff"] <= 1e-4
    check(record, name, "export_onnx", "yes" + note)
