"""SIGUSR1/SIGTERM as a request to checkpoint and stop, for the whole life of a command.

Kept free of TensorFlow so that train.py can install it before the slow imports: a
Slurm ``--signal`` warning that arrives while a rank is still starting must not kill it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading

log = logging.getLogger("bigearthnet")


class StopSignal:
    """SIGUSR1 (Slurm's ``--signal`` warning) and SIGTERM (time limit, ``scancel``) as a
    request to checkpoint and stop, for the whole life of a command.

    :meth:`handling` is entered by train.py before anything else, so a signal during
    start-up is remembered (training stops at its first step), one during validation stops
    the run at that epoch's end and one during the final evaluation stops it there (every
    rank votes; exit 3, the rerun evaluates); the previous handlers come back afterwards
    (in-process callers such as tests keep their own).
    """

    def __init__(self) -> None:
        self.requested = False
        self.early = False  # a SIGUSR1 before handling() began (see remember_warnings)
        self.own_process = False  # the command owns its process (see remember_warnings)

    def _remember(self, _signum, _frame) -> None:
        """SIGUSR1 outside handling(): kept for the next handling() (before it: start-up)
        and harmless after it (the command is finishing)."""
        self.early = True

    def _handle(self, signum, _frame) -> None:
        log.warning(
            "signal %d: checkpointing and stopping at the next step or epoch end (requeue)", signum
        )
        self.requested = True

    @contextlib.contextmanager
    def handling(self, warning_only: bool = False):
        """``warning_only``: SIGUSR1 alone (elastic runs, where horovodrun ends workers it
        no longer needs with SIGTERM, which must keep ending them)."""
        self.requested, self.early = self.early, False
        if self.requested:
            log.warning("SIGUSR1 during start-up: stopping at the first step to checkpoint")
        if threading.current_thread() is not threading.main_thread():
            yield  # signals can only be caught in the main thread
            return
        sigs = (signal.SIGUSR1,) if warning_only else (signal.SIGUSR1, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self._handle) for sig in sigs}
        try:
            yield self
        finally:
            for sig, old in previous.items():
                signal.signal(sig, self._after_handling(sig, old))

    def _after_handling(self, sig: int, previous):
        """What ``sig`` does once handling() ends: what it did before, except SIGTERM in a
        process that stopped on request and now only exits (3, checkpointed). srun
        --kill-on-bad-exit and horovodrun end the other tasks with SIGTERM as soon as the
        first exits 3, while the slower ones still shut TensorFlow and Horovod down; killed,
        they report 143 and the job script, which requeues only on 3, reports a failure.
        The work is saved, so the signal is ignored (Slurm's SIGKILL after KillWait, and
        horovodrun's after its grace time, still end a process that would not exit)."""
        if sig == signal.SIGTERM and self.requested and self.own_process:
            return signal.SIG_IGN
        return previous


STOP = StopSignal()


def remember_warnings() -> None:
    """For a command's own process: a SIGUSR1 outside :meth:`StopSignal.handling` no longer
    kills it. One that comes during start-up (before the training set up its handlers) is
    acted on at the first step; one that comes after training stopped is ignored - the job
    script passes the warning to the ranks one after another, and a rank that already
    stopped (the first one's vote is enough) would otherwise die of it (exit 138) instead of
    exiting 3; nor does a SIGTERM while it exits 3 (:meth:`StopSignal._after_handling`).
    Not for in-process callers, whose handlers stay theirs."""
    STOP.own_process = True
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, STOP._remember)


def ignore_warnings_now() -> None:
    """At the end of a command's own process: a SIGUSR1 from here on is ignored by the
    kernel. A Python handler would not do: while the interpreter shuts down, Python puts
    every signal with a Python handler back to its default action, and a warning the job
    script passed on late then killed a rank that had stopped and saved (exit 138 instead
    of 3). An ignored signal stays ignored through the shutdown."""
    if STOP.own_process and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
