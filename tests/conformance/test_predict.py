"""Every task's predictions (``sesame-predict``, ``Predictor.from_run``) are its module's: the network
alone (no Lightning) and the Lightning module give the same outputs on the dev batches, and the same
predictions, which are those the evaluation wrote (where the task says how to read them back)."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from sesame.tasks.inference.predictor import Predictor, TorchRunner, runner_for
from sesame.tasks.saved.checkpoints import load_trained
from tests.conformance.checks import dev_batches, meets, metrics_of, outputs, predictor_inputs, runner_inputs, same
from tests.conformance.specs import SPECS


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_the_network_alone_and_the_lightning_module_predict_what_the_evaluation_wrote(spec, trained):
    run = trained(spec)
    network = runner_for(run)  # sesame-predict's runner: the task's network, no Lightning
    lightning = TorchRunner(load_trained(run))  # the Lightning module the evaluation ran
    assert not isinstance(network.module, L.LightningModule) and isinstance(lightning.module, L.LightningModule)

    for batch in dev_batches(lightning.trained):
        inputs = runner_inputs(lightning.trained, batch)
        ours = outputs(lightning.module, batch)
        for runner in (network, lightning):
            got = runner(inputs)
            got = got if isinstance(got, tuple) else (got,)
            assert len(got) == len(ours) and all(torch.equal(g, o) for g, o in zip(got, ours))

    pairs = predictor_inputs(spec, run, lightning.trained)
    inputs = [i for i, _ in pairs]
    by_network = Predictor.from_runner(network)(inputs)
    by_lightning = Predictor.from_runner(lightning)(inputs)
    same(by_network, by_lightning)  # bit for bit
    if spec.expectations() is not None:  # every evaluated dev example, as the evaluation's files say
        assert len(pairs) == metrics_of(run)["val_examples_scored"]
        meets(by_network, pairs)
