"""Model compression for trained sesame models (``sesame-compress``) and distillation training.

- :mod:`.int8`: dynamic int8 quantisation of every ``nn.Linear`` (CPU inference), and the marker
  that makes ``sesame-eval`` rebuild the quantised structure before loading the weights.
- :mod:`.quantize`: ``sesame-compress quantize`` (checkpoint -> quantised run folder).
- :mod:`.drop_layers`: ``sesame-compress drop-layers`` (keep k transformer layers: a student encoder).
- :mod:`.distill`: the frozen teacher and its logit cache behind ``distill.teacher=...``.
- :mod:`.prune`: ``sesame-compress prune`` (remove the least important attention heads and feed-forward
  neurons); :mod:`.prune_importance` scores them (masks, ``|dL/dmask|``).
"""
