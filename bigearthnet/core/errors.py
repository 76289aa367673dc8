"""The project's error classes and the checks that raise them: one home for "what went wrong"
and for the exit code each kind of failure gets (see :mod:`bigearthnet.cli.common`).

* :class:`InputError` - the input or the options cannot be used (a missing file, a corrupt
  shard, a bad flag value). Nothing was done; commands exit 2.
* :class:`RunFailed` - the command ran and failed (a non-finite loss, a split not scored
  exactly once). Outputs written so far stay valid; commands exit 1.
* :class:`RequeueRequested` - Slurm's warning (SIGUSR1) or SIGTERM stopped the run after a
  checkpoint; a batch script requeues on exit 3.

Kept free of TensorFlow and Horovod so that option errors answer at once.
"""

from __future__ import annotations

import math
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_REQUEUE = 3  # stopped after checkpointing: resubmit to continue


class InputError(ValueError):
    """Bad input or options: one line naming the file or flag and the problem; exit 2."""


class ConfigError(InputError):
    """An invalid option value; ``key`` names the option when one is to blame (so the
    reader of a YAML file can name the file too)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class UsageError(InputError):
    """A flag argparse rejected (unknown, missing, not a number), or a command line the
    command cannot act on (a missing archive folder, a task index out of range)."""


class RunFailed(RuntimeError):
    """The run could not finish; what it wrote so far is kept; exit 1."""


class EvaluationError(RunFailed):
    """The gathered predictions do not cover the split exactly once (a bug, not bad input)."""


class RequeueRequested(RuntimeError):
    """Every rank stopped at the same step and rank 0 checkpointed; exit 3 (requeue me)."""


def require_positive_int(flag: str, value: int) -> int:
    """``value`` if it is an integer >= 1, else ConfigError naming ``flag``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{flag} must be a positive integer, got {value}")
    return value


def require_non_negative_int(flag: str, value: int) -> int:
    """``value`` if it is an integer >= 0 (a seed, a count that may be none), else
    ConfigError naming ``flag``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{flag} must be an integer >= 0, got {value}")
    return value


def require_open_fraction(flag: str, value: float) -> float:
    """``value`` if it lies inside (0, 1), else ConfigError naming ``flag``."""
    if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
        raise ConfigError(f"{flag} must be inside (0, 1), got {value}")
    return float(value)


def require_probability(flag: str, value: float) -> float:
    """``value`` if it lies in (0, 1], else ConfigError naming ``flag``."""
    if not (isinstance(value, (int, float)) and 0.0 < value <= 1.0):
        raise ConfigError(f"{flag} must be in (0, 1], got {value}")
    return float(value)


def require_non_negative(flag: str, value: float) -> float:
    """``value`` if it is a finite number >= 0, else ConfigError naming ``flag``."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ConfigError(f"{flag} must be >= 0, got {value}")
    return float(value)


def require_positive(flag: str, value: float) -> float:
    """``value`` if it is a finite number > 0, else ConfigError naming ``flag``."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{flag} must be positive, got {value}")
    return float(value)


def require_folder_path(flag: str, value: Path) -> Path:
    """``value`` if it names a folder or nothing yet (an output folder to make), else
    ConfigError naming ``flag``: checked when parsed, not when the work is done."""
    if value.exists() and not value.is_dir():
        raise ConfigError(f"{flag} {value}: an existing file, not a folder")
    return value


def require_fraction(flag: str, value: float) -> float:
    """``value`` if it lies in [0, 1) (a rate, a decay), else ConfigError naming ``flag``."""
    if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
        raise ConfigError(f"{flag} must be in [0, 1), got {value}")
    return float(value)


def require_given(flag: str, value: str) -> str:
    """``value`` unless it is empty (a folder every run names), else ConfigError."""
    if not value:
        raise ConfigError(f"{flag} is required")
    return value
