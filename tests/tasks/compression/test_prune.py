"""Structured pruning (``sesame-compress prune``): masks, importance scores, the compact model, its run
folder (evaluated, predicted, reloaded, trained further, resumed), its exports, and the bad inputs.

The runs are tiny (``tiny_bert4``: 3 layers of 4 heads of size 4, 32 feed-forward neurons each), so
that layers can keep different numbers of heads."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.compression.prune import prune, training_batches
from sesame.tasks.compression.prune_importance import PruningMasks, importance, normalised, select
from sesame.tasks.core.errors import ConfigError, DataError, UserError
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.families import prune_layout
from sesame.tasks.encoders.pruning import BERT_LAYOUT, PLAN_KEY, PruningPlan, layer_stack, present, prune_model
from sesame.tasks.runs.runner import train
from sesame.tasks.saved.checkpoints import load_trained
from tests.conftest import at_real_tokens, build_tiny_bert
from tests.tasks.export.conftest import dev_data
from tests.tasks.inference.test_predictor import run_overrides, sst2_texts, trained_run

#: An uneven plan for ``tiny_bert4``: per layer the heads kept, and the neurons kept (positions).
KEEP_HEADS = [[0, 2], [1, 2, 3], [3]]
KEEP_NEURONS = [list(range(0, 32, 3)), list(range(1, 32, 2)), [0, 5, 6, 7, 30]]
#: Tasks of every kind: a sentence, sentence pairs with a regression score, SQuAD v1 and v2, tagging with a CRF.
TASKS = ["sst2", "stsb", "squad_v1", "squad_v2", "ner_crf"]


@pytest.fixture(scope="session")
def bert4_dir(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert4"), num_layers=3, heads=4)


@pytest.fixture(scope="module")
def run4(make_cfg, tmp_path_factory, bert4_dir):
    """``run4(name)``: a tiny trained run of tests/tasks/inference/test_predictor.py's RUNS on ``tiny_bert4``."""
    return lambda name: trained_run(name, make_cfg, tmp_path_factory, encoder=bert4_dir)


@pytest.fixture(scope="module")
def pruned(run4, tmp_path_factory):
    """``pruned(name)``: ``run4(name)`` pruned with --heads 0.3 --ffn 0.4 (once each): (folder, report)."""
    done: dict[str, tuple[Path, dict]] = {}

    def get(name: str) -> tuple[Path, dict]:
        if name not in done:
            folder = tmp_path_factory.mktemp(f"pruned_{name}") / "out"
            done[name] = folder, prune(run4(name), folder, heads=0.3, ffn=0.4, batches=3)
        return done[name]

    return get


def _features(module, batch) -> tuple[torch.Tensor]:
    """The encoder's last hidden state [B, T, H] (the outputs of a tiny briefly trained head move little)."""
    with torch.inference_mode():
        state = module.encoder(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"), all_layers=False)[0]
    return at_real_tokens((state,), batch["attention_mask"])


def _outputs(module, batch) -> tuple[torch.Tensor, ...]:
    """The module's outputs, 0 at padding (a pruned model's layers run padding-free, masked ones on the padding)."""
    with torch.inference_mode():
        out = module(batch)
    return at_real_tokens(out if isinstance(out, tuple) else (out,), batch["attention_mask"])


def _set_masks(masks: PruningMasks, keep_heads, keep_neurons) -> None:
    """Zero the masks of every head and neuron not kept."""
    with torch.no_grad():
        for layer, kept in enumerate(keep_heads):
            off = [h for h in range(masks.heads[layer].numel()) if h not in kept]
            masks.heads[layer][off] = 0
        for layer, kept in enumerate(keep_neurons):
            off = [n for n in range(masks.neurons[layer].numel()) if n not in kept]
            masks.neurons[layer][off] = 0


#: |pruned - masked| allowed: the same sums without the zero terms, in float32.
ATOL = 2e-6


def _assert_same(got, want, atol=ATOL):
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, atol=atol, rtol=0)


# Masks and the compact model -------------------------------------------------------------------------

@pytest.mark.parametrize("name", TASKS)
def test_the_pruned_model_computes_what_the_masked_model_computes(run4, name):
    trained = load_trained(run4(name))
    module = trained.module
    module.encoder.padding_free = False  # masks run the padded layers: all ones must be exactly this model
    batches, _ = dev_data(trained, batch_size=8, limit=16)
    model = module.encoder.model
    student = copy.deepcopy(module)
    plan = prune_model(student.encoder.model, BERT_LAYOUT, KEEP_HEADS, KEEP_NEURONS)
    assert plan.heads == tuple(map(tuple, KEEP_HEADS)) and plan.neurons == tuple(map(len, KEEP_NEURONS))
    assert present(student.encoder.model, BERT_LAYOUT) == ([2, 3, 1], [11, 16, 5])
    changed, worst = 0.0, 0.0
    for batch in batches:
        plain = _outputs(module, batch) + _features(module, batch)
        with PruningMasks(model, BERT_LAYOUT) as masks:  # all ones: exactly the model
            for got, want in zip(_outputs(module, batch) + _features(module, batch), plain, strict=True):
                assert torch.equal(got, want)
            _set_masks(masks, KEEP_HEADS, KEEP_NEURONS)
            masked = _outputs(module, batch) + _features(module, batch)
        ours = _outputs(student, batch) + _features(student, batch)
        _assert_same(ours, masked, atol=ATOL)
        changed = min(float((m - p).abs().max()) for m, p in zip(masked, plain))
        worst = max(worst, *(float((o - m).abs().max()) for o, m in zip(ours, masked)))
        # Every output moved far more than the tolerance: the comparison would fail for a wrong model.
        assert changed > 30 * ATOL, f"the masks barely change the outputs ({changed:.3g})"
    print(f"{name}: pruned vs masked differ by up to {worst:.3g}")
    assert not [h for h in model.modules() if h._forward_hooks], "a mask hook was left on the model"


def test_masks_of_a_pruned_model_follow_its_sizes(run4):
    student = copy.deepcopy(load_trained(run4("sst2")).module)
    prune_model(student.encoder.model, BERT_LAYOUT, KEEP_HEADS, KEEP_NEURONS)
    masks = PruningMasks(student.encoder.model, BERT_LAYOUT)
    assert [m.numel() for m in masks.heads] == [2, 3, 1] and [m.numel() for m in masks.neurons] == [11, 16, 5]


def test_a_plan_composes_and_is_checked(bert4_dir):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(bert4_dir)
    plan = PruningPlan.unpruned(config).then(KEEP_HEADS, KEEP_NEURONS)
    again = plan.then([[1], [0, 2], [0]], [[0, 1], [2], [4]])  # positions among what the first plan kept
    assert again.heads == ((2,), (1, 3), (3,)) and again.neurons == (2, 1, 1)
    assert plan.dropped([0, 2]).heads == ((0, 2), (3,))
    plan.record(config)
    assert PruningPlan.of_config(config) == plan
    PruningPlan.unpruned(config).record(config)  # keeping everything is no record
    assert not hasattr(config, PLAN_KEY)
    setattr(config, PLAN_KEY, {**plan.as_record(), "num_attention_heads": 8})
    with pytest.raises(DataError, match="belongs to another model"):
        PruningPlan.of_config(config)
    with pytest.raises(ValueError, match="layer 1"):
        PruningPlan(4, 32, ((0,), ()), (3, 3))


# Importance ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sst2", "squad_v1", "ner_crf"])
def test_importance_is_the_finite_difference_of_the_loss(run4, name, monkeypatch):
    """|dL/dmask| summed over batches equals central differences of the module's own training loss
    in each mask entry, per batch, abs, summed. All in float64: the heads compute their losses in
    float32 (``.float()``, for stable low-precision training), which is kept float64 here so that the
    differences are exact to ~1e-10."""
    to_float32 = torch.Tensor.float
    monkeypatch.setattr(torch.Tensor, "float", lambda t: t if t.dtype == torch.float64 else to_float32(t))
    trained = load_trained(run4(name))
    module = copy.deepcopy(trained.module).double()
    batches = [{k: v[:6] for k, v in batch.items()} for batch in training_batches(trained, 2)]  # 6 rows: quicker
    assert len(batches) == 2 and all(len(b["input_ids"]) == 6 for b in batches)
    scores = importance(module, batches, BERT_LAYOUT)
    assert scores.batches == 2
    module.eval()
    eps = 1e-5
    largest_loss = 0.0
    with torch.no_grad(), PruningMasks(module.encoder.model, BERT_LAYOUT) as masks:
        for kind in ("heads", "neurons"):
            for layer, mask in enumerate(getattr(masks, kind)):
                reference = torch.zeros(mask.numel(), dtype=torch.float64)
                for batch in batches:
                    for i in range(mask.numel()):
                        mask[i] = 1 + eps
                        up = float(module.training_step(batch, 0))
                        mask[i] = 1 - eps
                        down = float(module.training_step(batch, 0))
                        mask[i] = 1
                        reference[i] += abs(up - down) / (2 * eps)
                        largest_loss = max(largest_loss, abs(up))
                assert reference.abs().max() > 0
                # Rounding a loss of size |L| costs ~1e-16 |L| / eps in a difference; the truncation, ~eps**2.
                torch.testing.assert_close(getattr(scores, kind)[layer], reference, rtol=1e-6,
                                           atol=1e-9 * max(1.0, largest_loss))


def test_importance_reaches_a_frozen_encoder_and_leaves_the_module_as_it_was(make_cfg, bert4_dir):
    from sesame.tasks.saved.checkpoints import build_module
    from sesame.tasks.runs.runner import build_datamodule, settings_with_data

    cfg = make_cfg("finetune=frozen", "data.max_train_examples=8", f"encoder.name_or_path={bert4_dir}", tiny=False)
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    module = build_module(settings_with_data(RunSettings.from_config(cfg), dm)).train()
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    scores = importance(module, [next(iter(dm.train_dataloader()))], BERT_LAYOUT)
    assert all(s.min() > 0 for s in scores.heads + scores.neurons)  # the frozen encoder's graph was kept
    assert module.training and {n for n, p in module.named_parameters() if p.requires_grad} == trainable
    assert not module.encoder_graph_always


def test_scores_are_normalised_per_layer_and_ranked_across_layers():
    scores = [torch.tensor([3.0, 4.0]), torch.tensor([1.0, 0.0, 0.0]), torch.zeros(2)]
    norm = normalised(scores)
    torch.testing.assert_close(norm[0], torch.tensor([0.6, 0.8]))
    torch.testing.assert_close(norm[1], torch.tensor([1.0, 0.0, 0.0]))
    assert torch.equal(norm[2], torch.zeros(2))
    ranked = [torch.tensor([0.6, 0.8]), torch.tensor([1.0, 0.1, 0.2]), torch.tensor([0.5, 0.05])]
    assert select(ranked, 0.0, "heads", "--heads", "x") == [[0, 1], [0, 1, 2], [0, 1]]
    assert select(ranked, 0.3, "heads", "--heads", "x") == [[0, 1], [0, 2], [0]]  # 2.1: the 2 lowest
    assert select(ranked, 0.4, "heads", "--heads", "x") == [[0, 1], [0], [0]]  # 2.8: 0.05, 0.1, 0.2
    assert select([torch.ones(2), torch.ones(2)], 0.25, "heads", "--heads", "x") == [[1], [0, 1]]  # 0.5 -> 1; ties: lowest layer, position
    with pytest.raises(ConfigError, match=r"--heads 0.6 removes 4 of 7 heads, among them every one of layer 2 \(2\)\. "
                                          r"Fix: lower --heads, or x"):
        select(ranked, 0.6, "heads", "--heads", "x")


# The command -----------------------------------------------------------------------------------------

def test_prune_writes_a_smaller_run_folder_of_the_scored_plan(run4, pruned):
    folder, report = pruned("sst2")
    assert json.loads((folder / "compression.json").read_text()) == report
    assert report["heads"]["before"] == 12 and report["heads"]["after"] == 12 - round(0.3 * 12)
    assert report["neurons"]["before"] == 96 and report["neurons"]["after"] == 96 - round(0.4 * 96)
    kept_heads, kept_neurons = report["heads"]["kept_per_layer"], report["neurons"]["kept_per_layer"]
    assert [len(h) for h in kept_heads] == report["heads"]["per_layer"]
    assert sum(report["heads"]["per_layer"]) == report["heads"]["after"]
    # The lowest scores went, across layers, once each layer's were divided by their L2 norm.
    for kind, kept in (("heads", kept_heads), ("neurons", kept_neurons)):
        raw = report["importance"][f"{kind}_raw"]
        scores = [[v / sum(x * x for x in row) ** 0.5 for v in row] for row in raw]
        assert scores == [pytest.approx(row, rel=2e-5) for row in report["importance"][kind]]
        assert len({max(row) for row in raw}) == len(raw)  # layers differ: the normalisation matters
        gone = [s for layer, row in enumerate(scores) for i, s in enumerate(row) if i not in kept[layer]]
        stay = [s for layer, row in enumerate(scores) for i, s in enumerate(row) if i in kept[layer]]
        assert gone and max(gone) <= min(stay)
    # The record in the encoder's config.json, and the sizes it rebuilds.
    record = json.loads((folder / "encoder" / "config.json").read_text())[PLAN_KEY]
    assert [layer["heads"] for layer in record["layers"]] == kept_heads
    assert [layer["neurons"] for layer in record["layers"]] == [len(n) for n in kept_neurons]
    student = load_trained(folder)
    assert present(student.module.encoder.model, BERT_LAYOUT) == (report["heads"]["per_layer"], report["neurons"]["per_layer"])
    assert sum(p.numel() for p in student.module.parameters()) == report["parameters"]["after"]
    source = load_trained(run4("sst2"))
    assert report["parameters"]["before"] == sum(p.numel() for p in source.module.parameters()) > report["parameters"]["after"]
    # Every weight pruning does not cut is the source's; the pruned model is the masked source.
    src, dst = source.module.state_dict(), student.module.state_dict()
    assert src.keys() == dst.keys()
    cut = {k for k in dst if dst[k].shape != src[k].shape}
    assert {k.split(".layer.")[1].split(".", 1)[1] for k in cut} == {
        f"{name}.{part}" for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                                      "intermediate.dense") for part in ("weight", "bias")} | {
        "attention.output.dense.weight", "output.dense.weight"}
    for key in dst.keys() - cut:
        assert torch.equal(dst[key], src[key]), key
    batches, _ = dev_data(source, batch_size=8, limit=16)
    for batch in batches:
        with PruningMasks(source.module.encoder.model, BERT_LAYOUT) as masks:
            _set_masks(masks, kept_heads, kept_neurons)
            masked = _outputs(source.module, batch)
        _assert_same(_outputs(student.module, batch), masked)


def test_the_pruned_run_evaluates_and_predicts(make_cfg, pruned, tmp_path):
    from sesame.tasks.inference.predictor import Predictor
    from sesame.tasks.runs.evaluation import evaluate
    from tests.conftest import prediction_accuracy

    folder, _ = pruned("sst2")
    metrics = evaluate(RunSettings.from_config(make_cfg(*run_overrides("sst2"), f"++model={folder}")), tmp_path / "eval")
    written = tmp_path / "eval" / "val_SST-2.tsv"
    assert metrics["val_accuracy"] == pytest.approx(prediction_accuracy(written))
    outputs = Predictor.from_run(folder)([{"id": i, "text": t} for i, t in enumerate(sst2_texts(40))])
    rows = [line.split("\t") for line in written.read_text().splitlines()[1:]]
    assert len(rows) == 40 and {o["id"]: o["label"] for o in outputs} == {int(i): p for i, p in rows}


@pytest.mark.parametrize("name", ["stsb", "squad_v2", "ner_crf"])
def test_every_task_prunes_and_its_pruned_run_loads(run4, pruned, name):
    folder, report = pruned(name)
    student, source = load_trained(folder), load_trained(run4(name))
    assert report["heads"]["after"] < report["heads"]["before"] and report["neurons"]["after"] < report["neurons"]["before"]
    batches, _ = dev_data(source, batch_size=8, limit=8)
    for batch in batches:
        with PruningMasks(source.module.encoder.model, BERT_LAYOUT) as masks:
            _set_masks(masks, report["heads"]["kept_per_layer"], report["neurons"]["kept_per_layer"])
            masked = _outputs(source.module, batch)
        _assert_same(_outputs(student.module, batch), masked)


def test_the_pruned_encoder_reloads_and_trains_further_with_its_teacher_and_resumes(make_cfg, run4, pruned, tmp_path):
    folder, report = pruned("sst2")
    student = load_trained(folder).module
    # The encoder folder alone, as encoder.name_or_path reads it: the same network, the same outputs.
    encoder = Encoder(str(folder / "encoder"))
    encoder.padding_free = student.encoder.padding_free
    batches, _ = dev_data(load_trained(folder), batch_size=8, limit=8)
    for batch in batches:
        with torch.inference_mode():
            want = student.encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            got = encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        _assert_same(got, want, atol=0)
    # pooling=pooler: the head holds the trained pooler; the encoder folder carries it for a model trained from it.
    assert torch.equal(encoder.model.pooler.dense.weight, student.pooling.dense.weight)
    # Recovery training: the pruned encoder, distilled from the unpruned run; then resumed for an epoch more.
    overrides = [*run_overrides("sst2"), f"encoder.name_or_path={folder / 'encoder'}", f"distill.teacher={run4('sst2')}",
                 "data.max_train_examples=32", "data.batch_size=8"]
    run = tmp_path / "recovered"
    metrics = train(RunSettings.from_config(make_cfg(*overrides, "trainer.max_epochs=1", tiny=False)), run)
    assert "val_accuracy" in metrics
    step = lambda: torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]  # noqa: E731
    assert step() == 4
    train(RunSettings.from_config(make_cfg(*overrides, "trainer.max_epochs=2", "resume=true", tiny=False)), run)
    assert step() == 8
    recovered = load_trained(run).module
    assert present(recovered.encoder.model, BERT_LAYOUT) == (report["heads"]["per_layer"], report["neurons"]["per_layer"])
    trained_key = "encoder.model.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(recovered.state_dict()[trained_key], student.state_dict()[trained_key])


def test_pruned_runs_compose_with_pruning_drop_layers_and_quantize(run4, pruned, tmp_path):
    from sesame.tasks.compression.drop_layers import drop_layers
    from sesame.tasks.compression.quantize import quantize_checkpoint

    folder, report = pruned("sst2")
    again = prune(folder, tmp_path / "again", heads=0.2, ffn=0.2, batches=2)
    for first, second in zip(report["heads"]["kept_per_layer"], again["heads"]["kept_per_layer"]):
        assert set(second) <= set(first)  # indices of the unpruned layer's heads, still
    assert again["heads"]["before"] == report["heads"]["after"]
    assert present(load_trained(tmp_path / "again").module.encoder.model, BERT_LAYOUT)[1] == again["neurons"]["per_layer"]

    drop_layers(folder, tmp_path / "dropped", keep="0,2")
    dropped = load_trained(tmp_path / "dropped").module
    per_layer = report["heads"]["per_layer"], report["neurons"]["per_layer"]
    assert present(dropped.encoder.model, BERT_LAYOUT) == ([per_layer[0][0], per_layer[0][2]], [per_layer[1][0], per_layer[1][2]])

    quantize_checkpoint(folder, tmp_path / "int8")
    batches, _ = dev_data(load_trained(folder), batch_size=8, limit=8)
    assert _outputs(load_trained(tmp_path / "int8").module, batches[0])[0].shape == (8, 2)


# Exports ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sst2", "squad_v1", "ner"])
def test_the_hf_export_is_plain_transformers_with_the_pruned_outputs(pruned, name, tmp_path):
    import transformers

    from sesame.tasks.export.hf import export_hf

    folder = pruned(name)[0]  # sst2: pooling=pooler (the default), what transformers' classifier is
    report = export_hf(folder, tmp_path / "hf")
    assert "zero" in report["pruned"]
    trained = load_trained(folder)
    plan = PruningPlan.of_config(trained.module.encoder.model.config)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert PLAN_KEY not in config and config["intermediate_size"] == max(plan.neurons) < 32
    assert config["num_attention_heads"] == 4
    cls = {"sst2": "AutoModelForSequenceClassification", "squad_v1": "AutoModelForQuestionAnswering",
           "ner": "AutoModelForTokenClassification"}[name]
    hf = getattr(transformers, cls).from_pretrained(tmp_path / "hf").eval()
    base = getattr(hf, hf.base_model_prefix)
    for index, (heads, neurons) in enumerate(zip(plan.heads, plan.neurons)):
        out = layer_stack(base, BERT_LAYOUT)[index].attention.output.dense.weight.reshape(16, 4, 4)
        removed = [h for h in range(4) if h not in heads]
        assert not out[:, removed].any() and out[:, list(heads)].abs().sum(-1).all()
        assert not layer_stack(base, BERT_LAYOUT)[index].output.dense.weight[:, neurons:].any()
    assert "structured (sesame-compress prune)" in (tmp_path / "hf" / "README.md").read_text()
    batches, _ = dev_data(trained, batch_size=8, limit=12)
    for batch in batches:
        ours = _outputs(trained.module, batch)
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.inference_mode():
            theirs = hf(**inputs)
        if name == "squad_v1":
            context = batch["context_mask"].bool()
            _assert_same((theirs.start_logits[context], theirs.end_logits[context]),
                         (ours[0][context], ours[1][context]), atol=1e-6)
        elif name == "ner":
            real = batch["attention_mask"].bool()
            _assert_same((theirs.logits[real],), (ours[0][real],), atol=1e-6)
        else:
            _assert_same((theirs.logits,), ours, atol=1e-6)


def test_the_onnx_export_is_the_compact_model(pruned, tmp_path):
    from tests.conftest import require

    require("onnxruntime")
    require("onnxscript")
    from sesame.tasks.export.onnx import export_onnx
    from sesame.tasks.inference.onnx_runner import OnnxRunner

    folder, report = pruned("ner_crf")
    export = export_onnx(folder, tmp_path / "onnx")
    assert export["max_abs_diff"] < 1e-4
    import onnx

    graph = onnx.load(str(tmp_path / "onnx" / "model.onnx"))
    sizes = {tuple(t.dims) for t in graph.graph.initializer}
    for neurons in report["neurons"]["per_layer"]:  # the compact weights, not zero-padded ones
        assert {(16, neurons), (neurons, 16)} & sizes
    trained = load_trained(folder)
    runner = OnnxRunner.from_folder(tmp_path / "onnx", threads=1)
    batches, _ = dev_data(trained, batch_size=7, limit=14)
    for batch in batches:
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
        real = batch["attention_mask"].bool()
        _assert_same((runner(inputs)[real],), (_outputs(trained.module, batch)[0][real],), atol=1e-5)


# Bad inputs ------------------------------------------------------------------------------------------

def _cli(capsys, *argv) -> str:
    from sesame.tasks.cli.compress import main

    with pytest.raises(SystemExit) as exit_:
        main(["prune", *map(str, argv)])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert exit_.value.code == 2 and len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--heads", "1", "--heads 1: the share of them to remove lies in [0, 1)"),
    ("--heads", "-0.1", "--heads -0.1: the share of them to remove lies in [0, 1)"),
    ("--ffn", "1.5", "--ffn 1.5: the share of them to remove lies in [0, 1)"),
    ("--batches", "0", "--batches 0: score on at least 1 training batch"),
])
def test_a_fraction_outside_0_1_names_its_flag(run4, capsys, tmp_path, flag, value, said):
    assert said in _cli(capsys, run4("sst2"), tmp_path / "out", flag, value)
    assert not (tmp_path / "out").exists()


def test_removing_every_head_of_a_layer_names_the_layer(run4, capsys, tmp_path):
    line = _cli(capsys, run4("sst2"), tmp_path / "out", "--heads", "0.9", "--batches", "1")
    assert "--heads 0.9 removes 11 of 12 attention heads, among them every one of layer " in line
    assert "lower --heads, or remove the layer with sesame-compress drop-layers" in line
    assert not (tmp_path / "out").exists() and not list(tmp_path.iterdir())


def test_an_int8_run_is_refused(run4, tmp_path):
    from sesame.tasks.compression.quantize import quantize_checkpoint

    quantize_checkpoint(run4("sst2"), tmp_path / "int8")
    with pytest.raises(ConfigError, match="quantised \\(int8\\): prune before quantising"):
        prune(tmp_path / "int8", tmp_path / "out", heads=0.3)
    assert not (tmp_path / "out").exists()


def test_a_lora_run_is_refused(make_cfg, bert4_dir, tmp_path):
    run = tmp_path / "lora"
    train(RunSettings.from_config(make_cfg("finetune=lora", "data.max_train_examples=16", "data.max_eval_examples=16",
                   f"encoder.name_or_path={bert4_dir}", tiny=False)), run)
    with pytest.raises(ConfigError, match=r"trained LoRA adapters \(finetune=lora\) on the projections pruning cuts"):
        prune(run, tmp_path / "out", heads=0.3)
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_never_written_over(run4, capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    line = _cli(capsys, run4("sst2"), out, "--heads", "0.3")
    assert "exists" in line and "new folder" in line
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    with pytest.raises(UserError, match="exists"):
        prune(run4("sst2"), tmp_path, heads=0.3)


def test_a_family_without_a_layout_is_named(make_cfg, tmp_path_factory, bert4_dir, tmp_path):
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertModel

    folder = tmp_path_factory.mktemp("tiny_distilbert")
    tokenizer = AutoTokenizer.from_pretrained(bert4_dir)
    DistilBertModel(DistilBertConfig(vocab_size=len(tokenizer), dim=16, n_heads=4, n_layers=2, hidden_dim=32)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    run = tmp_path / "run"
    train(RunSettings.from_config(make_cfg("pooling=mean", "data.max_train_examples=16", "data.max_eval_examples=16",
                   f"encoder.name_or_path={folder}", tiny=False)), run)
    with pytest.raises(ConfigError, match=r"sesame-compress prune: structured pruning does not know where the distilbert "
                                          r"family keeps .*; it supports bert, roberta, xlm-roberta, electra"):
        prune(run, tmp_path / "out", heads=0.3)
    # A folder whose config claims a pruned distilbert is refused on loading, naming the folder.
    config = json.loads((folder / "config.json").read_text())
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "config.json").write_text(json.dumps({**config, PLAN_KEY: {"layers": [{"heads": [0], "neurons": 1}]}}))
    with pytest.raises(ConfigError, match="fake: its config.json records a pruned model \\(sesame_pruning\\): structured "
                                          "pruning does not know where the distilbert family"):
        Encoder(str(tmp_path / "fake"), load_weights=False)


def test_the_supported_families_have_the_layout_their_models_have(tmp_path):
    import transformers

    for model_type, name in [("bert", "Bert"), ("roberta", "Roberta"), ("xlm-roberta", "XLMRoberta"), ("electra", "Electra")]:
        config = getattr(transformers, f"{name}Config")(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                                       num_attention_heads=4, intermediate_size=32, embedding_size=16)
        layout = prune_layout(config, "test")
        model = getattr(transformers, f"{name}Model")(config).eval()
        ids = torch.randint(5, 50, (2, 7))
        before = model(input_ids=ids).last_hidden_state
        with PruningMasks(model, layout) as masks:
            _set_masks(masks, [[1, 3], [0]], [[0, 1, 2], list(range(20))])
            masked = model(input_ids=ids).last_hidden_state
        prune_model(model, layout, [[1, 3], [0]], [[0, 1, 2], list(range(20))])
        assert not torch.allclose(before, masked)
        torch.testing.assert_close(model(input_ids=ids).last_hidden_state, masked, atol=2e-6, rtol=0)
        model.save_pretrained(tmp_path / model_type)
        from sesame.tasks.encoders.families import load_encoder_model

        loaded, info = load_encoder_model(str(tmp_path / model_type), model.config, load_weights=True)
        assert not info["missing_keys"]
        torch.testing.assert_close(loaded(input_ids=ids).last_hidden_state, masked, atol=2e-6, rtol=0)


# Iterative schedule (sesame-compress prune --rounds N --recover KEY=VALUE: tasks/runs/prune_schedule.py) -------

#: Recovery training of the tests: one epoch of 4 batches of 8.
RECOVER = ["trainer.max_epochs=1", "data.max_train_examples=32", "data.batch_size=8"]


@pytest.fixture(scope="module")
def schedule(run4, tmp_path_factory):
    """``run4("sst2")`` pruned --heads 0.3 --ffn 0.4 in 3 rounds, each recovered: (output, report)."""
    from sesame.tasks.runs.prune_schedule import prune_schedule

    out = tmp_path_factory.mktemp("schedule") / "out"
    return out, prune_schedule(run4("sst2"), out, heads=0.3, ffn=0.4, batches=2, rounds=3, recover=RECOVER)


@pytest.mark.parametrize("total", [1, 7, 12, 96, 1536, 18432])
@pytest.mark.parametrize("rounds", [1, 2, 3, 7])
def test_each_round_removes_its_share_and_the_last_ends_at_one_shot_counts(total, rounds):
    from sesame.tasks.runs.prune_schedule import removal_counts, round_fraction

    for fraction in (0.0, 0.05, 0.3, 0.4, 0.5, 0.9):
        gone = removal_counts(total, fraction, rounds)
        one_shot = int(fraction * total + 0.5)  # select's rounding
        assert len(gone) == rounds and gone[-1] == one_shot
        assert gone == sorted(gone) and all(abs(g - k * one_shot / rounds) <= 0.5 for k, g in enumerate(gone, 1))
        present = total
        for before, after in zip([0, *gone], gone):
            f = round_fraction(after - before, present)
            assert 0 <= f < 1 or after - before == present
            ranked = [torch.tensor([float(i) for i in range(present)])]
            if after - before < present:  # what select removes with that fraction: exactly the round's count
                assert present - len(select(ranked, f, "x", "--x", "x")[0]) == after - before
            present -= after - before
        assert present == total - one_shot


def test_an_iterative_schedule_prunes_recovers_with_the_teacher_and_ends_at_one_shot_counts(run4, pruned, schedule):
    out, report = schedule
    source = load_trained(run4("sst2")).checkpoint.resolve()
    assert json.loads((out / "compression.json").read_text()) == report
    assert json.loads((out / "schedule.json").read_text()) == {
        "source": str(source), "heads": 0.3, "ffn": 0.4, "batches": 2, "rounds": 3, "recover": RECOVER}
    # 12 heads, 96 neurons: one-shot removes 4 and 38; after round k, round(k/3 of that) are gone.
    rounds = report["rounds"]
    assert [r["heads"]["after"] for r in rounds] == [11, 9, 8] and [r["neurons"]["after"] for r in rounds] == [83, 71, 58]
    one_shot = pruned("sst2")[1]
    assert report["heads"]["after"] == one_shot["heads"]["after"] and report["neurons"]["after"] == one_shot["neurons"]["after"]
    assert [r["heads"]["before"] for r in rounds] == [12, 11, 9]
    assert [r["heads_fraction"] for r in rounds] == [1 / 12, 2 / 11, 1 / 9]  # each of what the round's model has
    assert rounds[-1]["heads_removed_share"] == pytest.approx(4 / 12) and rounds[0]["neurons_removed_share"] == pytest.approx(13 / 96)
    previous = source
    for k, entry in enumerate(rounds, 1):
        folder = out / "rounds" / str(k)
        assert entry["pruned"] == str(folder / "pruned") and entry["recovered"] == str(folder / "recovered")
        # Each round prunes the previous round's recovered run (the source first), scored again.
        pruned_report = json.loads((folder / "pruned" / "compression.json").read_text())
        assert pruned_report["source"] == str(previous)
        scored = [4, 4, 4] if k == 1 else rounds[k - 2]["heads"]["per_layer"]
        assert [len(h) for h in pruned_report["importance"]["heads"]] == scored
        # ... and recovers it: the pruned encoder, the source's config with the overrides, distilled from the source.
        cfg = OmegaConf.load(folder / "recovered" / "config.yaml")
        assert cfg.encoder.name_or_path == str((folder / "pruned" / "encoder").resolve())
        assert cfg.distill.teacher == str(source) and cfg.trainer.max_epochs == 1 and cfg.data.batch_size == 8
        assert cfg.data.max_train_examples == 32 and cfg.data.max_eval_examples == 40  # the source's own
        metrics = json.loads((folder / "recovered" / "metrics.json").read_text())
        assert metrics["train_steps"] == 4
        assert entry["metric"] == "val_accuracy" and entry["recovered_score"] == metrics["val_accuracy"]
        recovered = load_trained(folder / "recovered").module
        assert present(recovered.encoder.model, BERT_LAYOUT) == (entry["heads"]["per_layer"], entry["neurons"]["per_layer"])
        key = "encoder.model.encoder.layer.0.attention.self.query.weight"
        assert not torch.equal(recovered.state_dict()[key], load_trained(folder / "pruned").module.state_dict()[key])
        previous = (folder / "recovered" / "checkpoints" / "best.ckpt").resolve()
    # Kept heads are the source's indices, kept neurons given as positions among the source's too.
    last = load_trained(out / "rounds" / "3" / "recovered").module
    for k in range(2):
        for before, after in zip(rounds[k]["heads"]["kept_per_layer"], rounds[k + 1]["heads"]["kept_per_layer"]):
            assert set(after) <= set(before)
    for layer, kept in enumerate(report["neurons"]["kept_per_layer"]):
        assert len(kept) == report["neurons"]["per_layer"][layer] == present(last.encoder.model, BERT_LAYOUT)[1][layer]
        assert kept == sorted(kept) and set(kept) <= set(rounds[0]["neurons"]["kept_per_layer"][layer])
    assert report["score"] == rounds[-1]["recovered_score"] and report["teacher"] == str(source)
    assert report["parameters"]["after"] == sum(p.numel() for p in last.parameters()) < report["parameters"]["before"]


def test_the_schedule_output_is_the_last_recovered_run(make_cfg, schedule, tmp_path):
    from sesame.tasks.inference.predictor import Predictor
    from sesame.tasks.runs.evaluation import evaluate

    out, report = schedule
    last = out / "rounds" / "3" / "recovered"
    assert report["final_run"] == str(last)
    for name in ("config.yaml", "metrics.json", "checkpoints/best.ckpt", "encoder/config.json", "val_SST-2.tsv"):
        assert (out / name).read_bytes() == (last / name).read_bytes(), name
    trained, recovered = load_trained(out), load_trained(last)
    assert trained.encoder_folder == str(out / "encoder")
    for key, value in recovered.module.state_dict().items():
        assert torch.equal(trained.module.state_dict()[key], value), key
    # sesame-eval and sesame-predict run it as any run folder; its dev score is the recovered run's.
    metrics = evaluate(RunSettings.from_config(make_cfg(*run_overrides("sst2"), f"++model={out}")), tmp_path / "eval")
    assert metrics["val_accuracy"] == report["score"]
    outputs = Predictor.from_run(out)([{"id": i, "text": t} for i, t in enumerate(sst2_texts(40))])
    rows = [line.split("\t") for line in (tmp_path / "eval" / "val_SST-2.tsv").read_text().splitlines()[1:]]
    assert {o["id"]: o["label"] for o in outputs} == {int(i): p for i, p in rows}


def test_a_stopped_schedule_continues_from_its_finished_rounds(run4, tmp_path, monkeypatch):
    from sesame.tasks.runs import prune_schedule as schedule_module

    calls: list[tuple[str, object]] = []
    real_train, real_prune = schedule_module.train, schedule_module.prune
    dies = [Path("rounds/2/recovered")]

    def dying_train(settings, run_dir):
        calls.append(("train", settings.resume))
        real_train(settings, run_dir)
        if dies and Path(run_dir).match(f"*/{dies[0]}"):  # round 2's training dies before its metrics are written
            dies.clear()
            (Path(run_dir) / "metrics.json").unlink()
            raise RuntimeError("killed")

    def counted_prune(source, output, **kwargs):
        calls.append(("prune", Path(output).parent.name))
        return real_prune(source, output, **kwargs)

    monkeypatch.setattr(schedule_module, "train", dying_train)
    monkeypatch.setattr(schedule_module, "prune", counted_prune)
    out = tmp_path / "out"
    args = {"heads": 0.3, "ffn": 0.4, "batches": 2, "rounds": 3, "recover": RECOVER}
    with pytest.raises(RuntimeError, match="killed"):
        schedule_module.prune_schedule(run4("sst2"), out, **args)
    assert calls == [("prune", "1"), ("train", None), ("prune", "2"), ("train", None)]
    assert not (out / "compression.json").exists() and (out / "rounds" / "2" / "recovered" / "checkpoints" / "last.ckpt").is_file()
    first = (out / "rounds" / "1" / "recovered" / "checkpoints" / "best.ckpt").stat()
    stopped = (out / "rounds" / "2" / "recovered" / "checkpoints" / "last.ckpt").stat()
    # Other arguments are refused, naming what differs; the folder is left as it is.
    for changed, said in (({"heads": 0.4}, "--heads 0.3 there, 0.4 here"), ({"rounds": 2}, "--rounds 3 there, 2 here"),
                          ({"recover": RECOVER[:1]}, ("--recover trainer.max_epochs=1 data.max_train_examples=32 "
                                                      "data.batch_size=8 there, trainer.max_epochs=1 here"))):
        with pytest.raises(UserError, match=re.escape(said) + ".*rerun with its arguments to continue it"):
            schedule_module.prune_schedule(run4("sst2"), out, **{**args, **changed})
    # The same arguments: round 1 kept, round 2's training resumed from its checkpoint, round 3 run.
    calls.clear()
    report = schedule_module.prune_schedule(run4("sst2"), out, **args)
    assert calls == [("train", True), ("prune", "3"), ("train", None)]
    assert (out / "rounds" / "1" / "recovered" / "checkpoints" / "best.ckpt").stat().st_mtime_ns == first.st_mtime_ns
    # Resumed at its end (its one epoch was done): no step trained again, its last checkpoint not rewritten.
    assert (out / "rounds" / "2" / "recovered" / "checkpoints" / "last.ckpt").stat().st_mtime_ns == stopped.st_mtime_ns
    assert [r["heads"]["after"] for r in report["rounds"]] == [11, 9, 8]
    assert json.loads((out / "rounds" / "2" / "recovered" / "metrics.json").read_text())["train_steps"] == 4
    assert load_trained(out).checkpoint == out / "checkpoints" / "best.ckpt"
    # A finished schedule rerun returns its report and does nothing.
    calls.clear()
    assert schedule_module.prune_schedule(run4("sst2"), out, **args) == report and calls == []


def test_rounds_without_recovery_only_prune_scoring_each_model_again(run4, tmp_path):
    from sesame.tasks.runs.prune_schedule import prune_schedule

    out = tmp_path / "out"
    report = prune_schedule(run4("ner_crf"), out, heads=0.3, ffn=0.4, batches=2, rounds=2)
    assert [r["heads"]["after"] for r in report["rounds"]] == [10, 8] and report["neurons"]["after"] == 96 - 38
    assert "recovered" not in report["rounds"][0] and report["teacher"] is None and report["score"] is None
    assert not (out / "rounds" / "1" / "recovered").exists()
    second = json.loads((out / "rounds" / "2" / "pruned" / "compression.json").read_text())
    assert second["source"] == str(out / "rounds" / "1" / "pruned" / "checkpoints" / "best.ckpt")
    assert [len(s) for s in second["importance"]["heads"]] == report["rounds"][0]["heads"]["per_layer"]
    # The output is the last pruned run: the same weights, and its own report replaces the round's.
    trained, last = load_trained(out).module, load_trained(out / "rounds" / "2" / "pruned").module
    for key, value in last.state_dict().items():
        assert torch.equal(trained.state_dict()[key], value)
    assert json.loads((out / "compression.json").read_text())["rounds"][1]["heads_fraction"] == second["heads_fraction"]


def test_one_round_without_recovery_is_one_shot_pruning(run4, pruned, tmp_path, capsys):
    from sesame.tasks.cli.compress import main

    main(["prune", str(run4("sst2")), str(tmp_path / "out"), "--heads", "0.3", "--ffn", "0.4", "--batches", "3"])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["checkpoints", "compression.json", "config.yaml", "encoder"]
    report = json.loads((tmp_path / "out" / "compression.json").read_text())
    one_shot = pruned("sst2")[1]
    assert report["heads"]["kept_per_layer"] == one_shot["heads"]["kept_per_layer"] and "rounds" not in report
    assert json.loads(capsys.readouterr().out)["importance"] == f"{tmp_path / 'out'}/compression.json"


@pytest.mark.parametrize(("argv", "said"), [
    (["--rounds", "0"], "--rounds 0: prune in at least 1 round"),
    (["--rounds", "2", "--recover", "trainer.max_epochs"], "--recover trainer.max_epochs: give KEY=VALUE"),
    (["--recover", "trainer.max_epoch=1"], ("--recover trainer.max_epoch=1: the run's config has no key trainer.max_epoch "
                                            "(its trainer keys: max_epochs, max_steps,")),
    (["--recover", "+trainer.foo=1"], "--recover +trainer.foo=1: only settings the run's config has"),
    (["--recover", "encoder.name_or_path=x"], "the schedule sets encoder.name_or_path itself"),
    (["--recover", "trainer.max_epochs=1,2"], "one value per key"),
    (["--recover", "trainer=debug"], "--recover trainer=debug: trainer is a group of settings, not a setting"),
])
def test_bad_schedule_arguments_are_one_line_errors(run4, capsys, tmp_path, argv, said):
    line = _cli(capsys, run4("sst2"), tmp_path / "out", "--heads", "0.3", *argv)
    assert said in line, line
    assert not list(tmp_path.iterdir())


def test_an_existing_folder_that_is_no_schedule_is_refused(run4, capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    line = _cli(capsys, run4("sst2"), out, "--heads", "0.3", "--rounds", "2")
    assert "exists and holds no pruning schedule (schedule.json)" in line and "name a new folder" in line
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_a_schedule_stopped_by_sigterm_says_how_to_continue(run4, capsys, tmp_path, monkeypatch):
    import signal

    from sesame.tasks.core.errors import RunStopped
    from sesame.tasks.runs import prune_schedule as schedule_module

    def stopped(cfg, run_dir):
        raise RunStopped(f"SIGTERM received: the run in {run_dir} ended at step 2 with checkpoints/last.ckpt saved. Its "
                         f"metrics are not written yet. Continue it with the same command plus hydra.run.dir={run_dir} "
                         "resume=true", signal.SIGTERM)

    monkeypatch.setattr(schedule_module, "train", stopped)
    from sesame.tasks.cli.compress import main

    with pytest.raises(SystemExit) as exit_:
        main(["prune", str(run4("sst2")), str(tmp_path / "out"), "--heads", "0.3", "--rounds", "2", "--batches", "1",
              "--recover", "trainer.max_epochs=1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 143
    assert (f"stopped: round 1 of 2: SIGTERM received: the run in {tmp_path / 'out' / 'rounds' / '1' / 'recovered'} ended at "
            "step 2 with checkpoints/last.ckpt saved. Its metrics are not written yet. Continue the schedule with the same "
            f"sesame-compress prune command (output {tmp_path / 'out'})") in err
