"""``sesame-export``: placeholder until the exporter lands (see tasks/export/)."""


def main() -> None:  # pragma: no cover - replaced by the exporter's CLI
    raise SystemExit("sesame-export is not built yet")
