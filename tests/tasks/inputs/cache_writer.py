"""A feature-cache builder run as its own process by tests/tasks/inputs/test_feature_cache_writers.py:

    python tests/tasks/inputs/cache_writer.py <encoder folder> <cache folder> [--hang]

builds (or opens) the entry of :func:`batches` with every hidden state; ``--hang`` writes a
``started`` file beside the cache once the first batch is written, then waits to be killed mid-write.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

torch.set_num_threads(1)


def batches(vocab_size: int = 60) -> list[dict[str, torch.Tensor]]:
    """Six fixed batches of four rows of 3..12 real tokens ([4, 12] each), padding at the end."""
    generator = torch.Generator().manual_seed(7)
    out = []
    for _ in range(6):
        ids = torch.randint(5, vocab_size, (4, 12), generator=generator)
        lengths = torch.randint(3, 13, (4,), generator=generator)
        mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
        out.append({"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})
    return out


def main(argv: list[str]) -> None:
    from sesame.tasks.encoders.encoder import Encoder
    from sesame.tasks.inputs.feature_cache import build_or_open

    encoder_dir, cache_dir = argv[0], Path(argv[1])
    encoder = Encoder(encoder_dir)
    data = batches()
    if "--hang" in argv:
        forward = encoder.forward

        def slow_forward(*args, **kwargs):
            out = forward(*args, **kwargs)
            if not (cache_dir.parent / "started").exists():
                (cache_dir.parent / "started").write_text("1")
            else:
                time.sleep(60)  # killed here, its staging folder half-written
            return out

        encoder.forward = slow_forward
    build_or_open(encoder, [data], cache_dir, progress=False)


if __name__ == "__main__":
    main(sys.argv[1:])
