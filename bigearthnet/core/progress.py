"""The one progress bar of the project's commands (tqdm), shown on rank 0 only."""

from __future__ import annotations

from tqdm import tqdm


def progress_bar(
    total: int, *, desc: str, unit: str, enabled: bool, initial: int = 0, leave: bool = True
) -> tqdm:
    """A tqdm bar of ``total`` ``unit``s (a context manager), silent where not ``enabled``
    (other ranks, ``--no-progress``)."""
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit=unit,
        disable=not enabled,
        dynamic_ncols=True,
        leave=leave,
    )
