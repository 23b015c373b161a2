import json
import pytest
import torch
from sesame.tasks.compression.prune import prune
from sesame.tasks.saved.checkpoints import load_trained
from tests.conftest import build_tiny_bert
from tests.tasks.inference.test_predictor import trained_run


@pytest.fixture(scope="session")
def bert4_dir(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert4"), num_layers=3, heads=4)


def test_smoke(make_cfg, tmp_path_factory, bert4_dir, tmp_path):
    run = trained_run("sst2", make_cfg, tmp_path_factory, encoder=bert4_dir)
    report = prune(run, tmp_path / "p", heads=0.3, ffn=0.4, batches=4)
    print(json.dumps({k: v for k, v in report.items() if k != "importance"}, indent=1))
    t = load_trained(tmp_path / "p")
    print(t.module.encoder.model)
