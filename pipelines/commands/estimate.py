"""`capplan estimate` (being written: capacity-engine task)."""


def estimate() -> None:
    """Estimate one deployment (not yet implemented)."""
    raise SystemExit(2)
