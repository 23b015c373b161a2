"""How a console script ends on errors that are not sesame's bugs: a DDP peer that died is one line and the way to
resume, not gloo's traceback with the bug-report line; anything unexplained still asks for a bug report."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from sesame.tasks.cli.errors import REPORT, user_errors_are_messages

#: What the surviving rank of a two-process gloo run raised when the other rank was SIGKILLed mid-step.
GLOO_PEER_GONE = ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:43212: "
                  "Connection reset by peer")


@pytest.mark.parametrize("error", [dist.DistBackendError(GLOO_PEER_GONE), RuntimeError(GLOO_PEER_GONE),
                                   dist.DistNetworkError("Connection closed by peer")],
                         ids=["DistBackendError", "RuntimeError", "DistNetworkError"])
def test_a_dead_ddp_peer_is_one_line_with_how_to_resume(capsys, error):
    with pytest.raises(SystemExit) as ended, user_errors_are_messages():
        raise error
    err = capsys.readouterr().err
    assert ended.value.code == 1
    assert err.startswith("error: another process of this distributed run ended") and "resume=true" in err
    assert "Traceback" not in err and REPORT not in err and len(err.strip().splitlines()) == 1


def test_other_runtime_errors_still_ask_for_a_bug_report(capsys):
    with pytest.raises(SystemExit) as ended, user_errors_are_messages():
        raise RuntimeError("shape mismatch in the head")
    err = capsys.readouterr().err
    assert ended.value.code == 1 and "Traceback" in err and REPORT in err
