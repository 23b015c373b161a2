"""``sesame-export <run> <folder> --format onnx``: the whole trained network as one ONNX graph.

The graph is the task module's ``forward``: encoder, fusion (scalar mix and all), pooling and head,
and for QA the masking of positions outside the context. Inputs ``input_ids``, ``attention_mask``
[B, T] int64 ([B, G, T] for a task of groups of sequences: ``TaskExport.input_axes``), ``token_type_ids`` (only where the encoder reads them) and the task's own
(``TaskExport.extra_inputs``: QA's ``context_mask`` [B, T] bool); outputs the task's
(``TaskExport.output_names``: ``logits`` [B, C] classification, [B, T, C] tagging; ``start_logits`` /
``end_logits`` [B, T]). Batch and length axes are dynamic. What the graph does not hold the task
writes next to it (``TaskExport.write_files``): a CRF's transition scores (``crf.safetensors``, whose
Viterbi decoding the NER predictor runs with sesame's own decoder, ``OnnxRunner.head_state``), multi-label decision
thresholds (``thresholds.json``).

The export is checked before the folder appears: onnxruntime's outputs on probe batches of other
sizes and lengths than the example the graph was traced with must equal PyTorch's (the largest
difference is reported, :data:`TOLERANCE` is the limit). ``int8=True`` adds ``model.int8.onnx``,
onnxruntime's dynamic int8 quantisation of the graph's matrix products (weights int8, activations
quantised per call, from the whole activation tensor), with its agreement with the float graph reported;
sesame runs it one example at a time (``run_session_by_row``), so a prediction never depends on its batch.

Folder: ``model.onnx`` [``model.int8.onnx``], the tokenizer files, ``sesame_config.yaml`` (the
trained config: task, labels, data and head settings for ``sesame-predict``), the task's files
[``crf.safetensors``] [``thresholds.json``], ``export.json`` (the report) and ``README.md``. No ``config.json``: the folder is not a transformers one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from sesame.tasks.base.export import TaskExport
from sesame.tasks.saved.checkpoints import TrainedModel, load_trained
from sesame.tasks.saved.int8 import is_quantized
from sesame.tasks.core.known_noise import known_noise_silenced
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.export import as_tuple, check_output_folder, staged_folder, task_export
from sesame.tasks.export.model_card import write_model_card
from sesame.tasks.inference.onnx_session import (CONFIG_FILE, INT8_FILE, MODEL_FILE, new_session, run_session,
                                                 run_session_by_row)

log = logging.getLogger(__name__)

REPORT_FILE = "export.json"
#: ``exporter=``: ``dynamo`` (torch.export, torch's default ONNX exporter; needs onnxscript) or
#: ``torchscript`` (the older tracing exporter: faster, deprecated by torch).
EXPORTERS = ("dynamo", "torchscript")
#: Largest difference allowed between onnxruntime's and PyTorch's outputs, relative to their size.
TOLERANCE = 1e-4
#: Probe rows the graph is traced with, and the (other sizes and lengths) rows it is checked on.
EXAMPLE_ROWS = (0, 1)
CHECK_ROWS = ((2, 3, 0), (1,))


def input_names(trained: TrainedModel, task: TaskExport) -> list[str]:
    """The graph's inputs for this model: the encoder's and the task's (``TaskExport.extra_inputs``)."""
    names = ["input_ids", "attention_mask"]
    if trained.module.encoder.takes_token_types:
        names.append("token_type_ids")
    return names + list(task.extra_inputs)


#: ``attention=``: the attention the graph is traced with. ``eager`` (the default): the encoder's eager
#: attention, whatever it runs with in torch; ``model``: the one it runs with (SDPA for most families).
#: Traced from SDPA, the graph keeps torch's guard for fully masked rows (IsNaN + Where over every attention
#: matrix), which onnxruntime runs at every layer; the eager path's mask-add + Softmax is the same function
#: without it: benchmarks/export_attention.py measures both.
ATTENTION_TRACES = ("eager", "model")


@contextlib.contextmanager
def traced_attention(model: torch.nn.Module, attention: str = "eager") -> Iterator[str | None]:
    """While tracing, ``model`` (a transformers model) runs the attention ``attention`` (one of
    :data:`ATTENTION_TRACES`) asks for, and gets its own back after. Yields the implementation traced; a model
    that cannot switch (not built on transformers' AttentionInterface) keeps its own."""
    if attention not in ATTENTION_TRACES:
        raise ConfigError(f"--attention {attention}: use one of {', '.join(ATTENTION_TRACES)}")
    before = getattr(getattr(model, "config", None), "_attn_implementation", None)
    can_switch = getattr(model, "_can_set_attn_implementation", lambda: False)
    if attention == "model" or before in (None, "eager") or not can_switch():
        yield before
        return
    model.set_attn_implementation("eager")
    try:
        yield "eager"
    finally:
        model.set_attn_implementation(before)


def drop_node_metadata(model: Any) -> bool:
    """Drop the per-node debugging metadata torch.export writes (stack traces, module paths: about 2.5 kB
    a node) from ``model`` (an onnx ModelProto); True when there was any. onnxruntime's int8 pre-processing
    drops it only from the nodes it rewrites, so an int8 graph of a small model could be several times its
    weights."""
    dropped = False
    for node in model.graph.node:
        if node.metadata_props:
            del node.metadata_props[:]
            dropped = True
    return dropped


@known_noise_silenced()
def export_graph(trained: TrainedModel, path: Path, example: dict[str, torch.Tensor], exporter: str = "dynamo",
                 opset: int | None = None, attention: str = "eager") -> str | None:
    """Write the module's graph to ``path``, traced on ``example``, with dynamic batch and length axes and
    the encoder attention ``attention`` asks for (:func:`traced_attention`); returns the one traced."""
    if exporter not in EXPORTERS:
        raise ConfigError(f"exporter={exporter!r} is not one of {', '.join(EXPORTERS)}")
    task = task_export(trained)
    names, outputs = input_names(trained, task), list(task.output_names)
    graph = task.onnx_graph().eval()
    kwargs = {n: example[n] if n in example else torch.zeros_like(example["input_ids"]) for n in names}
    large = sum(p.numel() * p.element_size() for p in graph.parameters()) > 1_800_000_000  # ONNX protobufs stop at 2 GB
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad(), \
            traced_attention(trained.module.encoder.model, attention) as traced:
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # the torchscript exporter's notice
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)  # shape branches in transformers' masks
        warnings.filterwarnings("ignore", message=r".*The axis name: .* will not be used")  # batch/length named twice
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
        in_axes = dict(enumerate(task.input_axes))  # {0: "batch", 1: "length"}, or with a choices axis
        if exporter == "dynamo":
            dims = {axis: torch.export.Dim(axis, min=1) for axis in task.input_axes}
            torch.onnx.export(
                graph, (), str(path), kwargs=kwargs, input_names=names, output_names=outputs, dynamo=True,
                dynamic_shapes={n: {i: dims[a] for i, a in in_axes.items()} for n in names}, external_data=large,
                verbose=False, **({"opset_version": opset} if opset else {}),
            )
        else:
            out_axes = dict(enumerate(task.output_axes()))
            torch.onnx.export(
                graph, (), str(path), kwargs=kwargs, input_names=names, output_names=outputs, dynamo=False,
                dynamic_axes={**{n: in_axes for n in names}, **{o: out_axes for o in outputs}},
                opset_version=opset or 17,
            )
    return traced


def compare(task: TaskExport, reference: tuple[torch.Tensor, ...], other: tuple[torch.Tensor, ...],
            batch: Mapping[str, torch.Tensor]) -> tuple[float, float]:
    """``(max |reference - other|, max |reference|)`` over the positions that carry a value
    (``TaskExport.compared_positions``: every logit of a classifier, real tokens of a tagger, QA's
    unmasked ones); where those positions differ between the two (QA: masked in one, not the other)
    the difference is infinite."""
    diff, scale = 0.0, 0.0
    for ref, got in zip(reference, other, strict=True):
        ref, got = ref.float(), got.float()
        if ref.shape != got.shape:
            raise RuntimeError(f"the ONNX graph gave shape {list(got.shape)} where PyTorch gives {list(ref.shape)}")
        keep = task.compared_positions(ref, batch)
        if not torch.equal(keep, task.compared_positions(got, batch)):
            return float("inf"), 0.0
        if keep.any():
            diff = max(diff, float((ref[keep] - got[keep]).abs().max()))
            scale = max(scale, float(ref[keep].abs().max()))
    return diff, scale


#: How ``--int8`` scales the int8 weights: one scale per output column (per_channel, the default) or one per
#: matrix (per_tensor, the only scheme before). Per channel is as fast on onnxruntime's CPU kernels and keeps span
#: extraction: the full-data SQuAD v1.1 model lost 4.2 F1 per tensor, 1.0 per channel (all 10,570 dev questions).
INT8_WEIGHTS = ("per_channel", "per_tensor")


def quantize_int8(source: Path, target: Path, large: bool = False, weights: str = "per_channel") -> dict[str, int]:
    """onnxruntime's dynamic int8 quantisation of ``source`` into ``target``; returns node counts.
    ``large``: the graphs keep their weights in external data files (over 2 GB). ``weights``: one of
    ``INT8_WEIGHTS``, how the int8 weights are scaled (activations are quantised per tensor, per call)."""
    if weights not in INT8_WEIGHTS:
        raise ConfigError(f"--int8-weights {weights}: use one of {', '.join(INT8_WEIGHTS)}")
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=".int8-"))  # inside the staging folder
    prepared = scratch / source.name
    try:
        try:  # onnxruntime's recommended pre-processing (shape inference, graph clean-up); optional
            from onnxruntime.quantization.shape_inference import quant_pre_process

            quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True, save_as_external_data=large)
        except Exception as err:  # noqa: BLE001 - a graph it cannot pre-process is quantised as it is
            log.info("int8: pre-processing skipped (%s)", err)
            prepared = source
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # quantize_dynamic logs a "consider pre-processing" warning on the root logger
        try:
            quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8, use_external_data_format=large,
                             per_channel=weights == "per_channel")
        finally:
            root.setLevel(level)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ops = [node.op_type for node in onnx.load(str(target), load_external_data=False).graph.node]
    return {"MatMulInteger": ops.count("MatMulInteger"), "DynamicQuantizeLinear": ops.count("DynamicQuantizeLinear")}


def export_onnx(run: str | Path, output: str | Path, *, int8: bool = False, exporter: str = "dynamo",
                opset: int | None = None, threads: int | None = None, command: str | None = None,
                int8_weights: str = "per_channel", attention: str = "eager") -> dict[str, Any]:
    """Write the trained model of ``run`` (run folder or .ckpt) as an ONNX folder ``output``.

    Returns the report (also ``export.json`` and the model card): inputs, outputs, the largest
    difference between onnxruntime and PyTorch and, with ``int8``, the int8 graph's weight scheme
    (``int8_weights``, one of ``INT8_WEIGHTS``), difference and prediction agreement. ``attention``: the
    attention traced (:data:`ATTENTION_TRACES`); the check compares with the model as it runs in torch.
    """
    if exporter not in EXPORTERS:
        raise ConfigError(f"--exporter {exporter}: use one of {', '.join(EXPORTERS)}")
    if int8_weights not in INT8_WEIGHTS:
        raise ConfigError(f"--int8-weights {int8_weights}: use one of {', '.join(INT8_WEIGHTS)}")
    if attention not in ATTENTION_TRACES:
        raise ConfigError(f"--attention {attention}: use one of {', '.join(ATTENTION_TRACES)}")
    check_output_folder(output)
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401

        if exporter == "dynamo":
            import onnxscript  # noqa: F401
    except ImportError as err:
        raise ConfigError(f"--format onnx needs onnx, onnxruntime and (for --exporter dynamo) onnxscript; {err.name} is "
                          "missing: pip install 'sesame[export]'") from err
    trained = load_trained(run, key="run")
    encoder_family = trained.module.encoder.family
    if encoder_family.onnx_unsupported:
        raise ConfigError(f"--format onnx: {encoder_family.onnx_unsupported} (the {encoder_family.model_type} family). "
                          "Fix: --format hf "
                          "where the model maps onto transformers' task model, or run the sesame run folder itself "
                          "(sesame-eval / sesame-predict)")
    if exporter == "dynamo" and encoder_family.dynamo_unsupported:
        raise ConfigError(f"--exporter dynamo: {encoder_family.dynamo_unsupported} (the {encoder_family.model_type} "
                          "family). Fix: --exporter torchscript")
    if is_quantized(trained.cfg):
        raise ConfigError("--format onnx: this run's weights are torch dynamic-int8 (sesame-compress quantize), which "
                          "ONNX does not take. Fix: export the float run it was made from, with --int8 for an int8 graph")
    module = trained.module.eval()
    task = task_export(trained)
    tokenizer = trained.tokenizer()
    example = task.probe_batch(tokenizer, EXAMPLE_ROWS)
    checks = [task.probe_batch(tokenizer, rows) for rows in CHECK_ROWS]
    report: dict[str, Any] = {
        "format": "onnx", "output": str(Path(output).expanduser()), "checkpoint": str(trained.checkpoint),
        "exporter": exporter, "inputs": input_names(trained, task), "outputs": list(task.output_names),
    }
    with staged_folder(output) as folder:
        report["attention_option"] = attention
        report["attention"] = export_graph(trained, folder / MODEL_FILE, example, exporter=exporter, opset=opset,
                                           attention=attention)
        import onnx

        model = onnx.load(str(folder / MODEL_FILE), load_external_data=False)
        report["opset"] = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        if drop_node_metadata(model):  # external weight files stay where they are
            onnx.save(model, str(folder / MODEL_FILE))
        del model
        onnx.checker.check_model(str(folder / MODEL_FILE))
        session = new_session(folder / MODEL_FILE, threads=threads)
        worst = 0.0
        references = []
        for batch in checks:
            with torch.inference_mode():
                reference = tuple(o.float() for o in as_tuple(module(batch)))
            references.append(reference)
            diff, scale = compare(task, reference, run_session(session, batch), batch)
            if not diff <= TOLERANCE * max(1.0, scale):
                raise RuntimeError(f"the ONNX graph's outputs differ from PyTorch's by {diff:.3g} on a batch of "
                                   f"{list(batch['input_ids'].shape)}: the export is wrong")
            worst = max(worst, diff)
        report["max_abs_diff"] = worst
        files = sorted(p.name for p in folder.iterdir())  # model.onnx (and its external data, over 2 GB)
        large = len(files) > 1
        if int8:
            report["int8_nodes"] = quantize_int8(folder / MODEL_FILE, folder / INT8_FILE, large=large, weights=int8_weights)
            report["int8_weights"] = int8_weights
            quantized = new_session(folder / INT8_FILE, threads=threads)
            diff8, same, total, decided = 0.0, 0, 0, False
            for batch, reference in zip(checks, references):
                got = run_session_by_row(quantized, batch, task.output_axes())  # as sesame-predict runs it
                diff8 = max(diff8, compare(task, reference, got, batch)[0])
                ours, theirs = task.predictions(reference, batch), task.predictions(got, batch)
                if ours is not None and theirs is not None:  # None: scores, not decisions (regression)
                    agree = ours == theirs
                    same, total = same + int(agree.all(-1).sum() if agree.ndim > 1 else agree.sum()), total + len(agree)
                    decided = True
            report["int8_max_abs_diff"] = diff8
            report["int8_agreement"] = same / max(total, 1) if decided else None
            files += sorted(p.name for p in folder.iterdir() if p.name.startswith(INT8_FILE))
        tokenizer.save_pretrained(folder)
        (folder / CONFIG_FILE).write_text(OmegaConf.to_yaml(OmegaConf.create(trained.cfg)), encoding="utf-8")
        files.append(CONFIG_FILE)
        files += task.write_files(folder)  # a CRF's scores, multi-label thresholds: what OnnxRunner reads back
        report.update(task.report_entries())
        report["files"] = files
        (folder / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        write_model_card(folder, trained, report, command=command)
    log.info("wrote %s (max abs difference onnxruntime vs PyTorch %.3g)", output, worst)
    return report
