"""Shared fixtures: a tiny random BERT (a few thousand parameters) with a real WordPiece tokenizer,
and the real Hydra config composed with overrides; helpers for optional packages and for reading
prediction files without sesame."""

from __future__ import annotations

import copy
import importlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One torch thread per test process, and per process a test starts (DDP ranks, console scripts): the
# models are tiny, and on a loaded 2-core machine each extra thread only waits (a test took 151 s at the
# default threads, 12.7 s with one).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

from sesame.tasks.core.paths import shipped_path
from sesame.tasks.cli.resolvers import register_resolvers

register_resolvers()
torch.set_num_threads(1)  # see OMP_NUM_THREADS above


#: The modules that take longest (a minute or more of a worker on 2 cores), collected first: ``make test`` hands
#: whole modules to its workers (``--dist loadscope``, so a module's fixtures are built once), and starting the
#: long ones first keeps the short ones for the end, instead of one long module starting last on one worker.
LONGEST_FIRST = (
    "tests/conformance/test_training.py",
    "tests/test_readme_commands.py",
    "tests/tasks/core/test_distributed.py",
    "tests/families/test_matrix.py",
    "tests/benchmarks/test_compression.py",
    "tests/tasks/compression/test_prune.py",
    "tests/tasks/runs/test_ray_launcher.py",
    "tests/tasks/runs/test_checkpoint_callbacks.py",
    "tests/conformance/test_compression.py",
    "tests/tasks/export/test_model_card.py",
    "tests/tasks/runs/test_precision_and_compile.py",
    "tests/tasks/runs/test_optuna_pruning.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {module: i for i, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: module order kept


def require(module: str) -> ModuleType:
    """Import an optional package (an extra of pyproject.toml) for a test.

    Locally a missing package skips the test (``pytest.importorskip``); in CI (``CI`` set), where
    every extra is installed, it fails the test instead, so an extra that stopped installing is seen.
    """
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


SST2_DEV = Path(shipped_path("glue/sst2/dev.tsv"))


def tsv_labels(path: Path = SST2_DEV) -> list[str]:
    """The last column (the label) of every row of a GLUE TSV with a header, read without sesame."""
    rows = path.read_text(encoding="utf-8").splitlines()[1:]
    return [row.split("\t")[-1].strip() for row in rows if row.strip()]


def at_real_tokens(outputs: Sequence[torch.Tensor], attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``outputs`` with every value at a padding position set to 0: per-token outputs ([B, T, ...] for an
    ``attention_mask`` [B, T]) there are read by nothing, and padding-free layers (``encoder.padding_free``)
    never compute them. Outputs of another shape are returned as they are."""
    real = attention_mask.bool()
    return tuple(o.masked_fill(~real.view(*real.shape, *[1] * (o.dim() - real.dim())), 0)
                 if o.dim() >= real.dim() and o.shape[:real.dim()] == real.shape else o for o in outputs)


def prediction_accuracy(predictions: Path, gold: Path = SST2_DEV) -> float:
    """Accuracy of a GLUE prediction file (``index<TAB>prediction``, index = data row) against ``gold``."""
    labels = tsv_labels(gold)
    rows = [line.split("\t") for line in predictions.read_text(encoding="utf-8").splitlines()[1:]]
    assert rows, f"{predictions} holds no predictions"
    return sum(pred == labels[int(index)] for index, pred in rows) / len(rows)


def read_conll_predictions(path: Path) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    """Tokens, gold tags and predicted tags per sentence of an NER prediction file (``word gold pred``)."""
    tokens, gold, pred = [[]], [[]], [[]]
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line:
            tokens.append([]), gold.append([]), pred.append([])
            continue
        t, g, p = line.split(" ")
        tokens[-1].append(t), gold[-1].append(g), pred[-1].append(p)
    return tokens[:-1], gold[:-1], pred[:-1]


#: The tiny tokenizer's WordPiece vocabulary (400 entries), trained once with
#: ``tokenizers.trainers.WordPieceTrainer(vocab_size=400)`` on the lines of the shipped
#: ``glue/sst2/train.2k.tsv``, ``wnut17/train.1k.conll`` and ``squad_v1/dev.slice.json``, and kept:
#: the trainer breaks ties differently in every process, so every test session saw other token ids.
TINY_VOCAB = Path(__file__).parent / "fixtures" / "tiny_wordpiece_vocab.txt"


#: Text that is not space-separated English: Chinese, Japanese, Arabic, Hebrew with direction marks,
#: emoji (a zero-width-joiner family, a flag, a skin tone, a variation selector), decomposed accents,
#: lone combining marks and invisible characters, Devanagari. :func:`unicode_tokens` covers its characters.
UNICODE_LINES = [
    "我爱北京天安门。居里夫人住在巴黎。",
    "東京に住んでいます。",
    "مرحبا بالعالم، ماري كوري عاشت في باريس.",
    "\u200fשלום עולם\u200f, מארי קירי גרה בפריז.",
    "👨\u200d👩\u200d👧 family 🇫🇷 flag 👍🏽 ok ❤\ufe0f love",
    "Le cafe\u0301 de Marie Curie, cre\u0300me-brûlée nai\u0308ve a \u0301 b \u200d c \u200b d",
    "नमस्ते दुनिया",
]


def unicode_tokens() -> list[str]:
    """Every character of :data:`UNICODE_LINES` as BERT's normaliser leaves it (lowercase, no accents),
    alone and as a continuation (``##x``): the words of those lines are then sub-words, not [UNK]."""
    from tokenizers import normalizers

    normalize = normalizers.BertNormalizer(lowercase=True).normalize_str
    chars = sorted({c for line in UNICODE_LINES for c in normalize(line) if not c.isspace()})
    return [token for c in chars for token in (c, f"##{c}")]


def build_tiny_bert(folder: Path, num_layers: int = 4, hidden: int = 16, extra_tokens: Sequence[str] = (),
                    heads: int = 2) -> Path:
    """Save a random BertModel (``heads`` attention heads a layer) and a fast WordPiece tokenizer
    (vocabulary :data:`TINY_VOCAB`, then those of ``extra_tokens`` it lacks) into ``folder``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(TINY_VOCAB.read_text(encoding="utf-8").splitlines())}
    for token in extra_tokens:
        vocab.setdefault(token, len(vocab))
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, model_input_names=["input_ids", "token_type_ids", "attention_mask"], unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"
    )
    fast.model_max_length = 512
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def count_validations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The global step of every validation of the GLUE module, as it happens (a list that fills up)."""
    from sesame.tasks.glue.module import SentenceClassificationModule

    calls: list[int] = []
    original = SentenceClassificationModule.on_validation_epoch_end

    def counted(self: SentenceClassificationModule) -> None:
        calls.append(self.trainer.global_step)
        return original(self)

    monkeypatch.setattr(SentenceClassificationModule, "on_validation_epoch_end", counted)
    return calls


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def unicode_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT with the characters of :data:`UNICODE_LINES` in its vocabulary."""
    return build_tiny_bert(tmp_path_factory.mktemp("unicode_bert"), extra_tokens=unicode_tokens())


_COMPOSED: dict[tuple[str, ...], DictConfig] = {}


def composed(overrides: Sequence[str]) -> DictConfig:
    """The real config of ``sesame-train <overrides>``, composed once per test process and handed out as a
    copy each caller may change: a compose reads and merges every YAML file of ``conf/`` (about 0.1 s), and
    the suite asks for the same configs hundreds of times. Interpolations (``${data_dir:...}``, ``${oc.env:...}``)
    stay unresolved in it, so they read the caller's environment when used."""
    key = tuple(overrides)
    if key not in _COMPOSED:
        with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
            _COMPOSED[key] = compose(config_name="config", overrides=list(overrides))
    return copy.deepcopy(_COMPOSED[key])


@pytest.fixture(scope="session")
def make_cfg(tiny_bert_dir: Path) -> Callable[..., DictConfig]:
    """``make_cfg("task=glue", "finetune=frozen", ...)``: the real config, tiny encoder, a few batches."""

    def make(*overrides: str, tiny: bool = True) -> DictConfig:
        base = ["trainer=debug", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]
        if tiny:
            base.append(f"encoder.name_or_path={tiny_bert_dir}")
        return composed([*base, *overrides])

    return make
