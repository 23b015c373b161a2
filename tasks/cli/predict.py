"""``sesame-predict``: placeholder until the predictor lands (see tasks/predictor.py)."""


def main() -> None:  # pragma: no cover - replaced by the predictor's CLI
    raise SystemExit("sesame-predict is not built yet")
