"""The task conformance suite: every task of ``conf/task/*.yaml``, found by listing that folder, passes
the same checks, on one tiny run per task (trained once per test session, shared by the xdist workers).

The checks (one test each, per task; a test id ends in the task's name):

- ``test_training.py``: evaluating the saved model (``sesame-eval``) gives the training metrics (every
  ``val_*`` exactly) and the same prediction files; a run SIGKILLed mid-epoch and resumed ends
  bit-identical to the uninterrupted one (metrics and prediction files); two DDP processes (gloo, CPU)
  train on the single process's batches, split per rank, and end with its weights (1e-6, or what the task declares) and metrics
  and its prediction files (their numbers to 1e-5); a frozen run with the feature cache equals one
  without, and a second cached run never runs the encoder.
- ``test_predict.py``: ``Predictor.from_run`` (the network alone, no Lightning) and a predictor over the
  Lightning module give the module's outputs on the dev batches bit for bit, and the predictions the
  evaluation wrote.
- ``test_export.py``: ``--format hf`` (transformers' own task model) and ``--format onnx`` give the
  module's outputs on the dev batches to 1e-5, and the ONNX folder's predictor its predictions.
- ``test_compression.py``: int8 quantisation (the saved int8 model is the quantised module, close to the
  float one, and its evaluation files are its predictions); structured pruning (the compact model
  computes what the masked model computes); distillation from the trained run into a drop-layers
  student (the KL is logged, the teacher-logit cache changes nothing, the teacher changes the student).
- ``test_bad_lines.py``: a garbage line in the middle of the task's training file, and the file cut in
  the middle of a line, end ``sesame-train`` with exit code 2 and one ``error:`` line naming the file
  (and the line, where the reader gives one), no traceback and no run folder left.
- ``test_discovery.py``: every task is found, declarations name real tasks and known keys, and the
  suite's own code names no task.

What a task declares: ``tests/tasks/<package>/conformance.yaml``, in the tests folder of the package its
``task.module`` names (``sesame.tasks.<package>....``; ``glue`` and ``text_classification`` share
``tests/tasks/glue/``), one block per task name. Every key is optional; a task without a block (or a
package without the file) runs every check on the suite's defaults (:data:`specs.TINY_RUN`)::

    text_classification:
      overrides: [data.train_file=..., data.validation_file=...]   # on top of the suite's tiny run
      predict: sentence_expectations  # a function of tests/tasks/<package>/conformance.py: (folder, cfg) ->
                                      # [(predictor input, the output fields the evaluation files give)]
      refuses:                        # a check the task cannot support: the ConfigError it raises (regex)
        hf_export: "pooling=mean: .*"
      bad_lines:                      # a corruption the generic one cannot make: the whole bad file
        truncated: "..."
      ddp:                            # what one and two processes may not agree on, and why
        noise_parameters: [head.qa_outputs.bias]   # weights left out of the 1e-6 comparison
        weights_atol: 1e-5                         # the comparison's tolerance for the others (1e-6 unless given)
        unequal_metrics: [val_loss]
        unequal_files: [nbest_predictions.json]
        reason: "..."

Without ``predict`` the predict check compares the two paths and the module on the dev batches and on
the model card's example input, but not the evaluation's prediction files (which only the task can turn
back into predictor inputs). A refused check asserts the refusal and nothing else. A declaration with
an unknown key, check or corruption fails collection (a typo must not drop it silently).

Cost: one tiny training run per task, shared by every check; per task a killed run in a subprocess
and a two-process DDP run; the rest runs in the test process.
"""
