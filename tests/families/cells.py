"""The encoder-family matrix: its features (the columns of docs/encoders.md's table), the declared outcome of every
(family, feature) cell, the settings of each family's runs, and the recorder of the outcomes.

Each matrix test computes its cell's outcome from what actually happened (``yes``, with a note
where the behaviour differs between families, or ``no: <reason>`` taken from the ConfigError sesame
raised: :func:`reason_of`), records it, and asserts it equals the declaration in :data:`DECLARED`.
With ``SESAME_FAMILY_RESULTS=<file>`` the session writes the recorded outcomes there
(``docs/results/encoder_families.json``), from which ``tests/families/table.py`` renders the table of
``docs/encoders.md``; ``test_table.py`` checks that the committed file holds exactly the declared cells and that
the page shows exactly what it renders.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.families.builders import FAMILY_SPECS

#: ``(key, column title)`` of every feature, in table order.
FEATURES: tuple[tuple[str, str], ...] = (
    ("glue_pair", "GLUE pair task"),
    ("squad_v2", "SQuAD v2"),
    ("ner", "NER"),
    ("pair_inputs", "pair inputs"),
    ("fusion", "fusion"),
    ("top_k", "finetune=top_k"),
    ("drop_layers", "drop-layers"),
    ("cls", "pooling=cls"),
    ("pooler", "pooling=pooler"),
    ("export_hf", "export hf"),
    ("export_onnx", "export onnx"),
)
FEATURE_KEYS = tuple(key for key, _ in FEATURES)

#: What each family's three runs use: fusion and finetune mode per task (every family reads the last
#: layer, the second-to-last and a scalar mix, and trains full, frozen and top_k somewhere).
RUN_SETTINGS = {
    "glue": ["fusion=scalar_mix", "finetune=frozen"],
    "squad_v2": ["fusion=second_to_last", "finetune=full"],
    "ner": ["fusion=last", "finetune=top_k", "finetune.top_k=1"],
}


def run_settings(name: str, task: str) -> list[str]:
    """The fusion / finetune / pooling overrides of family ``name``'s run of ``task``: those of
    :data:`RUN_SETTINGS`, except where the family declares the setting impossible (tested apart)."""
    settings = list(RUN_SETTINGS[task])
    if task == "ner" and DECLARED[name]["top_k"].startswith("no:"):
        settings = ["fusion=last", "finetune=full"]
    if task == "glue":  # the cls path (sesame's default is pooler, which many families lack: tested apart)
        settings.append("pooling=mean" if DECLARED[name]["cls"].startswith("no:") else "pooling=cls")
    return settings


_SHARED = ("no: ALBERT applies one shared set of layer weights at every depth, so it has no separate module per "
           "layer")
_NO_POOLER = "no: the encoder has no pooler, no pretrained dense + tanh layer on the summary token to start from"
_T5_NO_CLS = ("no: T5's encoder has no [CLS]-style summary token (its first token is the input's first word)")

#: Cells that are not plain ``yes``, per family (``config.model_type``).
_DIFFERENCES: dict[str, dict[str, str]] = {
    "bert": {"pair_inputs": "yes (segment ids)"},
    "roberta": {},
    "distilbert": {"pooler": _NO_POOLER},
    "albert": {"pair_inputs": "yes (segment ids)", "top_k": _SHARED, "drop_layers": _SHARED},
    "electra": {"pair_inputs": "yes (segment ids)", "pooler": _NO_POOLER},
    "mobilebert": {"pair_inputs": "yes (segment ids)"},
    "xlnet": {"pair_inputs": "yes (segment ids)", "squad_v2": "yes (no-answer pointer: the question's first token)",
              "cls": "yes (the last token, <cls>)", "pooler": _NO_POOLER,
              "export_onnx": "yes (--exporter torchscript only: torch's dynamo exporter cannot convert transformers' "
                             "XLNet (its attention mask subtracts a tensor from a Python float, for which it finds no "
                             "aten.sub overload))"},
    "longformer": {"export_onnx": "no: Longformer's sliding-window attention reshapes its input into chunks whose "
                                  "number depends on the input's length, which neither ONNX exporter can trace with a "
                                  "dynamic length (torch.export stops on the data-dependent shape; a torchscript "
                                  "trace is wrong at other lengths)"},
    "deberta-v2": {"pooler": _NO_POOLER},
    "modernbert": {"pooler": _NO_POOLER,
                   "drop_layers": "yes (keeping layer 0: in ModernBertModel the bottom layer lacks weights the layers "
                                  "above have (attn_norm.weight), so layer 1 cannot become the bottom one without "
                                  "changing what it computes)",
                   "export_hf": "no: ModernBertForTokenClassification puts layers of its own (head) between the "
                                "encoder and its classifier, which this model never trained"},
    "xlm-roberta": {},
    "bart": {"pooler": _NO_POOLER,
             "export_hf": "no: transformers has no ModelForTokenClassification for model_type=bart"},
    "t5": {"squad_v2": "yes (no-answer pointer: the question's first token)", "cls": _T5_NO_CLS, "pooler": _T5_NO_CLS},
}

_DEFAULTS = {key: "yes" for key in FEATURE_KEYS} | {"pair_inputs": "yes (separators only)", "cls": "yes (the first token)"}

#: The declared outcome of every cell: ``yes``, ``yes (<note>)`` or ``no: <reason>``.
DECLARED: dict[str, dict[str, str]] = {name: {**_DEFAULTS, **_DIFFERENCES[name]} for name in FAMILY_SPECS}


# Reasons ------------------------------------------------------------------------------------------
_ENDS = (re.compile(r" \(the [\w-]+ family"), re.compile(r"\. Fix: "), re.compile(r"\. Use --format onnx"))


def reason_of(message: str) -> str:
    """The reason part of a sesame ConfigError: after the setting (``setting: reason``, or the last
    ``...: `` of a refusal listing reasons) and before ``(the <family> family)`` / ``. Fix:``."""
    end = min((m.start() for pattern in _ENDS if (m := pattern.search(message))), default=len(message))
    head = message[:end]
    if "does not map onto" in head:  # --format hf: "... does not map onto transformers' X: reason; reason"
        return head.split("does not map onto", 1)[1].split(": ", 1)[1]
    return head.split(": ", 1)[1] if ": " in head else head


# Recording ----------------------------------------------------------------------------------------
RECORDED: dict[str, dict[str, str]] = {}


def record(name: str, feature: str, cell: str) -> None:
    """Note the outcome of one cell (it is then compared with its declaration by the calling test)."""
    assert feature in FEATURE_KEYS, feature
    RECORDED.setdefault(name, {})[feature] = cell


def results(recorded: dict[str, dict[str, str]]) -> dict:
    """The results file's content: the features and, per family, its name and cells."""
    return {
        "generated_by": "SESAME_FAMILY_RESULTS=docs/results/encoder_families.json pytest tests/families",
        "features": [{"key": key, "title": title} for key, title in FEATURES],
        "families": [
            {"model_type": name, "name": spec.name, "tokenizer": spec.tokenizer, "cells": recorded[name]}
            for name, spec in FAMILY_SPECS.items()
        ],
    }


def complete(recorded: dict[str, dict[str, str]]) -> bool:
    return all(set(recorded.get(name, {})) == set(FEATURE_KEYS) for name in FAMILY_SPECS)


def write_results(path: Path) -> bool:
    """Write the recorded outcomes to ``path`` when every cell was recorded; False otherwise."""
    if not complete(RECORDED):
        missing = sorted(f"{n}.{k}" for n in FAMILY_SPECS for k in FEATURE_KEYS if k not in RECORDED.get(n, {}))
        print(f"\nSESAME_FAMILY_RESULTS: not written, {len(missing)} cells not recorded ({', '.join(missing[:5])} ...)")
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results(RECORDED), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nSESAME_FAMILY_RESULTS: wrote {path}")
    return True
