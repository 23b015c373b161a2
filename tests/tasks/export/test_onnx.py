"""``--format onnx``: onnxruntime gives PyTorch's outputs on real dev batches of other sizes and
lengths than the traced example, the int8 graph agrees on most predictions, and ``OnnxRunner`` is
``sesame-predict``'s ``ModelRunner`` with the module's outputs (CRF Viterbi included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sesame.tasks.core.errors import ConfigError, MissingFileError
from sesame.tasks.encoders.low_precision_attention import ATTENTION_NAME
from sesame.tasks.ner.network import tag_decoder
from tests.conftest import require
from tests.tasks.export.conftest import dev_data

#: Largest allowed |onnxruntime - PyTorch| (float32 graphs agree to ~1e-6 on these models).
TOLERANCE = 1e-4
#: The inputs sesame-predict gives a runner (tasks/inference/predictor.py: run_sorted).
RUNNER_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "context_mask")


#: The exporter each run is exported with: torch's default (dynamo) and, to keep the tests quick, the
#: older torchscript one (test_cli.py exports GLUE with it too); both give the module's outputs.
EXPORTERS = {"glue": "dynamo", "qa": "torchscript", "ner_crf": "dynamo"}


@pytest.fixture(scope="module")
def exported(loaded, tmp_path_factory):
    """``exported(name)``: the ONNX folder (with model.int8.onnx) of a trained run, exported once."""
    require("onnxruntime")
    require("onnxscript")
    from sesame.tasks.export.onnx import export_onnx

    done: dict[str, tuple[Path, dict]] = {}

    def get(name: str) -> tuple[Path, dict]:
        if name not in done:
            folder = tmp_path_factory.mktemp(f"onnx_{name}") / "export"
            done[name] = folder, export_onnx(loaded(name).checkpoint, folder, int8=True, exporter=EXPORTERS[name])
        return done[name]

    return get


def _masked_equal(trained, ref: torch.Tensor, got: torch.Tensor, batch: dict) -> float:
    from sesame.tasks.export import task_export
    from sesame.tasks.export.onnx import compare

    diff, _ = compare(task_export(trained), (ref,), (got,), batch)
    return diff


@pytest.mark.parametrize("name, family, limit", [
    ("glue", "sequence_classification", 20),
    ("qa", "question_answering", 6),
    ("ner_crf", "token_classification", 20),
])
def test_onnxruntime_gives_pytorch_outputs_and_the_runner_is_a_model_runner(loaded, exported, name, family, limit):
    from sesame.tasks.inference.onnx_runner import OnnxRunner
    from sesame.tasks.inference.predictor import ModelRunner, TorchRunner

    trained = loaded(name)
    folder, report = exported(name)
    assert {"model.onnx", "model.int8.onnx", "sesame_config.yaml", "README.md", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    assert not (folder / "config.json").exists()  # not a transformers folder: sesame-eval must not take it for one
    assert report["max_abs_diff"] < TOLERANCE

    runner = OnnxRunner.from_folder(folder, threads=1)
    int8 = OnnxRunner.from_folder(folder, None, int8=True)
    torch_runner = TorchRunner(trained)
    assert isinstance(runner, ModelRunner)
    assert runner.cfg == trained.cfg
    assert runner.input_names[:2] == ["input_ids", "attention_mask"]
    assert ("context_mask" in runner.input_names) == (family == "question_answering")

    batches, _ = dev_data(trained, batch_size=7, limit=limit)  # 7 rows, real lengths: not the traced 2 x ~10
    assert len({tuple(b["input_ids"].shape) for b in batches}) >= 2
    worst, same, total = 0.0, 0, 0
    for batch in batches:
        inputs = {k: batch[k] for k in RUNNER_INPUTS if k in batch}  # exactly as sesame-predict calls a runner
        ours, onnx = torch_runner(inputs), runner(inputs)
        quantized = int8(inputs)
        if family == "question_answering":
            assert isinstance(onnx, tuple) and len(onnx) == 2 and all(o.dtype == torch.float32 for o in onnx)
            worst = max(worst, *(_masked_equal(trained, r, g, batch) for r, g in zip(ours, onnx)))
            agree = (ours[0].argmax(-1) == quantized[0].argmax(-1)) & (ours[1].argmax(-1) == quantized[1].argmax(-1))
        else:
            assert isinstance(onnx, torch.Tensor) and onnx.dtype == torch.float32 and onnx.shape == ours.shape
            worst = max(worst, _masked_equal(trained, ours, onnx, batch))
            if family == "token_classification":
                words = batch["word_index"] >= 0
                head = trained.settings.head
                decoders = [tag_decoder(trained.module.tag_names, bool(head.crf), bool(head.constrain_bio), r.head_state())
                            for r in (torch_runner, runner)]
                tags = decoders[0].decode(ours, words)
                assert torch.equal(decoders[1].decode(onnx, words), tags)  # Viterbi on the graph's logits
                assert torch.equal(decoders[1].decode(ours, words), tags)  # the same decoder, bit for bit
                agree = (decoders[1].decode(quantized, words) == tags)[words]
            else:
                agree = ours.argmax(-1) == quantized.argmax(-1)
        same, total = same + int(agree.sum()), total + agree.numel()
    print(f"{name} ({report['exporter']}): max |onnxruntime - pytorch| = {worst:.3g} on real dev batches; "
          f"int8 agreement {same}/{total}")
    assert worst < TOLERANCE
    assert same >= 0.8 * total  # int8 changes the numbers a little, the predictions rarely


@pytest.mark.parametrize("name", ["glue", "qa"])
def test_the_graph_is_traced_with_eager_attention_and_the_model_keeps_its_own(loaded, exported, name):
    """SDPA traced into ONNX keeps torch's fully-masked-row guard (IsNaN + Where per layer); the eager trace has none,
    and the outputs still equal the SDPA model's (the export's own check, max_abs_diff). No node carries metadata."""
    import onnx

    from sesame.tasks.inference.onnx_session import MODEL_FILE

    folder, report = exported(name)
    model = loaded(name).module.encoder.model
    assert model.config._attn_implementation == ATTENTION_NAME  # the model as trained (SDPA), given back after the trace
    assert report["attention"] == "eager" and report["max_abs_diff"] <= TOLERANCE
    nodes = onnx.load(str(folder / MODEL_FILE)).graph.node
    assert "IsNaN" not in {node.op_type for node in nodes} and "Softmax" in {node.op_type for node in nodes}
    assert not any(node.metadata_props for node in nodes)  # torch.export's stack traces are not shipped


def test_traced_attention_gives_the_model_back_its_own_on_error_and_model_keeps_it(loaded):
    from sesame.tasks.export.onnx import traced_attention

    model = loaded("glue").module.encoder.model
    with pytest.raises(RuntimeError, match="trace failed"), traced_attention(model) as traced:
        assert traced == "eager" and model.config._attn_implementation == "eager"
        raise RuntimeError("trace failed")
    assert model.config._attn_implementation == ATTENTION_NAME
    with traced_attention(model, "model") as traced:
        assert traced == ATTENTION_NAME and model.config._attn_implementation == ATTENTION_NAME
    with pytest.raises(ConfigError, match="--attention flash: use one of eager, model"), traced_attention(model, "flash"):
        pass


def test_the_crf_runner_decodes_with_the_trained_transitions(loaded, exported):
    """The CRF's scores come from crf.safetensors, not from a fresh initialisation: with the file's
    scores replaced, the decoding follows them."""
    from sesame.tasks.inference.onnx_runner import OnnxRunner

    folder, report = exported("ner_crf")
    assert "crf.safetensors" in report["files"]
    runner = OnnxRunner.from_folder(folder)
    trained = loaded("ner_crf")
    head = trained.settings.head
    crf = tag_decoder(trained.module.tag_names, bool(head.crf), bool(head.constrain_bio), runner.head_state()).crf
    trained_crf = trained.module.head.crf
    for name in ("start_transitions", "end_transitions", "transitions", "allowed_transitions", "allowed_start"):
        assert torch.equal(getattr(crf, name), getattr(trained_crf, name)), name


def test_runner_overrides_and_errors(loaded, exported, tmp_path):
    from sesame.tasks.inference.onnx_runner import OnnxRunner

    folder, _ = exported("qa")
    runner = OnnxRunner.from_folder(folder, {"head.max_answer_length": 7, "data.doc_stride": 16})
    assert runner.cfg["head"]["max_answer_length"] == 7 and runner.cfg["data"]["doc_stride"] == 16
    assert runner.tokenizer()("who ?")["input_ids"] == loaded("qa").tokenizer()("who ?")["input_ids"]
    with pytest.raises(ConfigError, match="encoder.name_or_path"):
        OnnxRunner.from_folder(folder, {"encoder.name_or_path": "minilm_l6"})
    with pytest.raises(ConfigError, match="head.crf"):
        OnnxRunner.from_folder(folder, {"head.crf": True})
    assert runner.head_state() == {}  # QA decodes from its logits alone
    with pytest.raises(MissingFileError, match="model.onnx"):
        OnnxRunner.from_folder(tmp_path)


def _raw_inputs(name: str) -> list[dict]:
    import json

    from sesame.tasks.core.paths import shipped_path

    if name == "glue":
        lines = Path(shipped_path("glue/sst2/dev.tsv")).read_text(encoding="utf-8").splitlines()[1:25]
        return [{"text": line.split("\t")[0]} for line in lines]
    if name == "qa":
        squad = json.loads(Path(shipped_path("squad_v1/dev.slice.json")).read_text(encoding="utf-8"))
        return [{"id": q["id"], "question": q["question"], "context": p["context"]}
                for a in squad["data"] for p in a["paragraphs"] for q in p["qas"]][:12]
    sentences = Path(shipped_path("wnut17/dev.300.conll")).read_text(encoding="utf-8").split("\n\n")[:16]
    return [{"text": " ".join(line.split()[0] for line in s.splitlines() if line.strip())} for s in sentences if s.strip()]


@pytest.mark.parametrize("name", ["glue", "qa", "ner_crf"])
def test_sesame_predict_on_the_onnx_folder_gives_the_run_folders_predictions(trained_run, exported, name):
    from sesame.tasks.inference.predictor import Predictor

    folder, _ = exported(name)
    inputs = _raw_inputs(name)
    from_torch = Predictor.from_run(trained_run(name))(inputs)
    from_onnx = Predictor.from_run(folder)(inputs)
    assert len(from_onnx) == len(from_torch) == len(inputs)
    for t, o in zip(from_torch, from_onnx):
        if name == "glue":
            assert o["label"] == t["label"]
            assert o["probabilities"] == pytest.approx(t["probabilities"], abs=1e-5)
        elif name == "qa":
            assert (o["answer"], o["char_start"], o["char_end"]) == (t["answer"], t["char_start"], t["char_end"])
            assert o["score"] == pytest.approx(t["score"], abs=1e-4)
        else:
            assert o["tags"] == t["tags"] and o["tokens"] == t["tokens"]
            assert [e["text"] for e in o["entities"]] == [e["text"] for e in t["entities"]]


@pytest.mark.parametrize("name", ["glue", "qa", "ner_crf"])
def test_predictions_from_an_onnx_folder_load_no_lightning(exported, name):
    """An ONNX folder runs without the training code: Lightning is never imported, nor datasets where the
    task's predictor does not window with it (QA does) (seconds of start-up; README "Speed", start-up)."""
    from tests.tasks.inference.test_predictor import predict_in_a_fresh_process

    folder, _ = exported(name)
    inputs = _raw_inputs(name)[:2]
    [(outputs, imported)] = predict_in_a_fresh_process([(folder, inputs)], ("lightning", "datasets"))
    assert len(outputs) == len(inputs)
    assert imported == (["datasets"] if name == "qa" else []), imported


def test_sesame_predict_int8_runs_the_int8_graph_or_quantises_a_run(trained_run, exported, tmp_path, capsys):
    import json

    from sesame.tasks.cli.predict import main
    from sesame.tasks.saved.int8 import count_quantized_linear
    from sesame.tasks.inference.onnx_runner import OnnxRunner
    from sesame.tasks.inference.predictor import Predictor, runner_for

    folder, _ = exported("glue")
    inputs = _raw_inputs("glue")
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in inputs), encoding="utf-8")
    main([str(folder), str(source), "--int8"])
    got = [json.loads(line)["probabilities"] for line in capsys.readouterr().out.splitlines()]
    int8 = [o["probabilities"] for o in Predictor.from_runner(OnnxRunner.from_folder(folder, int8=True))(inputs)]
    fp32 = [o["probabilities"] for o in Predictor.from_run(folder)(inputs)]
    assert got == int8 and got != fp32  # model.int8.onnx, not model.onnx
    quantized, plain = count_quantized_linear(runner_for(trained_run("glue"), int8=True).module)
    assert quantized > 0 and plain == 0  # a run folder: its linear layers in dynamic int8


#: How far an int8 probability of one sentence may move with the batch around it: onnxruntime runs the int8 graph
#: one example at a time at its own length, so the same float operations on the same inputs (bit-equal in practice).
INT8_BATCH_TOLERANCE = 1e-6


@pytest.mark.parametrize("name", ["glue", "ner_crf"])
def test_an_int8_prediction_does_not_depend_on_the_batch_around_it(exported, name):
    from sesame.tasks.inference.onnx_runner import OnnxRunner
    from sesame.tasks.inference.onnx_session import run_session
    from sesame.tasks.inference.predictor import Predictor

    folder, _ = exported(name)
    runner = OnnxRunner.from_folder(folder, int8=True, threads=1)
    predict = Predictor.from_runner(runner, batch_size=8)
    inputs = _raw_inputs(name)
    target = min(inputs, key=lambda i: len(i["text"]))  # the shortest: most padding around it in a batch
    others = sorted((i for i in inputs if i is not target), key=lambda i: -len(i["text"]))[:6]
    alone = predict([target])[0]
    in_batch = predict([*others[:3], target, *others[3:]])[3]
    if name == "glue":
        assert alone["label"] == in_batch["label"]
        assert alone["probabilities"].keys() == in_batch["probabilities"].keys()
        assert max(abs(p - in_batch["probabilities"][k]) for k, p in alone["probabilities"].items()) <= INT8_BATCH_TOLERANCE
    else:
        assert alone["entities"] == in_batch["entities"]

    # What the fixed batching removes: the same graph run on the whole padded batch moves the sentence's outputs.
    if name == "glue":
        tokenizer = runner.tokenizer()
        texts = [i["text"] for i in [*others[:3], target]]
        batch = dict(tokenizer(texts, padding=True, return_tensors="pt"))
        whole = run_session(runner.session, batch)[0][3]
        single = run_session(runner.session, dict(tokenizer([target["text"]], return_tensors="pt")))[0][0]
        assert not torch.equal(whole, single)
