"""Every Horovod call of the project, in one place.

Training is data-parallel: each rank holds a full model replica, reads its own part of
the data, and gradients are averaged with an allreduce before every optimizer step, so
all replicas stay identical. The rest of the code asks this module for the rank, the
world size and the few collectives it needs (sum counts, gather scores, broadcast state)
and never imports Horovod itself.

Launchers: ``horovodrun -np N [--gloo]``, ``mpirun``, or Slurm's ``srun --mpi=pmix`` with
an MPI-built Horovod. A Gloo-only build started by plain ``srun`` runs every task as an
independent world of size 1 - silently training N separate models. :func:`init`
compares ``hvd.size()`` with the task count the launcher announced and stops loudly.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

from bigearthnet.core.errors import InputError, RunFailed
from bigearthnet.core.util import first_line

log = logging.getLogger("bigearthnet")


class DistributedError(InputError):
    """The processes do not form the world the launcher asked for (or another rank failed
    while setting up): nothing can be trained; exit 2."""


def init(
    threads: int | None = None,
    fusion_threshold_mb: float | None = None,
    cycle_time_ms: float | None = None,
    timeline: str | None = None,
    elastic: bool = False,
) -> None:
    """Start Horovod, check the world size, pin this rank's GPU, set CPU threads, logging."""
    # Horovod: tuning knobs are read from the environment by hvd.init(), so set them first.
    if fusion_threshold_mb is not None:
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(fusion_threshold_mb * 1024 * 1024))
    if cycle_time_ms is not None:
        os.environ["HOROVOD_CYCLE_TIME"] = str(cycle_time_ms)
    if timeline:
        os.environ["HOROVOD_TIMELINE"] = str(timeline)  # Horovod: written by rank 0
    if threads:
        set_threads(threads)
    # Horovod: join the other processes (MPI or Gloo, whichever launched us).
    hvd.init()
    setup_logging()
    if not elastic:
        check_world_size()
    pin_gpu()


def set_threads(threads: int) -> None:
    """Size TensorFlow's thread pools (ranks sharing a node must not oversubscribe it).

    Pools can only be sized before the runtime starts; in a process where TensorFlow already
    ran (a notebook, an in-process test) the existing pools are kept.
    """
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(min(2, threads))
    except RuntimeError:
        current = tf.config.threading.get_intra_op_parallelism_threads()
        if current != threads:  # a command that loads its model first would oversubscribe
            log.warning("TensorFlow already started: %d thread(s) asked for, keeping %s",
                        threads, current or "all")  # fmt: skip


def check_world_size(environ=os.environ) -> None:
    """Raise DistributedError when the launcher started more tasks than Horovod sees."""
    expected, source = launcher_size(environ)
    if expected is not None and expected != hvd.size():
        raise DistributedError(
            f"{source}={expected} but Horovod sees {hvd.size()} process(es): this Horovod "
            f"build ({controllers()}) was not wired to the launcher; use an MPI build with "
            "`srun --mpi=pmix`, or `horovodrun --gloo`"
        )


def launcher_size(environ=os.environ) -> tuple[int | None, str]:
    """The number of tasks the launcher says it started, and the variable that says so."""
    for var in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"):
        value = environ.get(var)
        if value and value.isdigit():
            if var == "SLURM_STEP_NUM_TASKS" and "SLURM_STEP_ID" not in environ:
                continue  # a batch script, not an srun step
            return int(value), var
    return None, ""


def controllers() -> str:
    built = [name for name, ok in (("MPI", hvd.mpi_built()), ("Gloo", hvd.gloo_built())) if ok]
    return "+".join(built) or "no controller"


def pin_gpu() -> None:
    # Horovod: one GPU per process, chosen by local rank; memory growth so that TF does not
    # grab the whole card at start-up (and so several test ranks can share one).
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")


def rank() -> int:
    return hvd.rank()


def size() -> int:
    return hvd.size()


def local_size() -> int:
    # Horovod: the ranks on this node, which share its memory.
    return hvd.local_size()


def is_root() -> bool:
    return hvd.rank() == 0


def compression(fp16: bool):
    # Horovod: halve the bytes on the wire; gradients are cast back after the exchange.
    return hvd.Compression.fp16 if fp16 else hvd.Compression.none


# Horovod's collectives branch on Python values only (the op, the compression, the process
# set), so autograph has nothing to convert in them; converting them anyway cost a
# ResNet-50 training ~4.5 s of tracing (215 gradients, each allreduce's code transformed and
# called through autograph's wrappers). Unconverted, they trace the same ops.
@tf.autograph.experimental.do_not_convert
def allreduce_gradients(grads: list, *, fp16: bool = False, grouped: bool = False) -> list:
    """Average gradients over ranks (inside a tf.function): hvd.DistributedGradientTape's
    math. By default one allreduce per gradient, which overlaps communication with the rest
    of the backward pass; ``grouped``: a single grouped allreduce after the whole pass."""
    if grouped:
        # Horovod: a grouped allreduce negotiates all gradients together, so it cannot start
        # before backprop has made the last one (the first layer's).
        return hvd.grouped_allreduce(grads, op=hvd.Average, compression=compression(fp16))
    # Horovod: each allreduce op is asynchronous and enqueued as soon as its gradient
    # exists; the background thread fuses whatever is ready each cycle (up to
    # HOROVOD_FUSION_THRESHOLD bytes) and reduces it while backprop continues.
    return [
        hvd.allreduce(g, op=hvd.Average, compression=compression(fp16), name=f"grad_{i}")
        for i, g in enumerate(grads)
    ]


@tf.autograph.experimental.do_not_convert
def allreduce_mean(value: tf.Tensor, name: str) -> tf.Tensor:
    # Horovod: average a logged value (loss) so every rank sees, and acts on, the same number.
    return hvd.allreduce(value, op=hvd.Average, name=name)


@tf.autograph.experimental.do_not_convert
def sum_over_ranks(value: tf.Tensor, name: str) -> tf.Tensor:
    """Element-wise sum over ranks inside a tf.function (a step's counts, before the
    forward pass that divides by them)."""
    # Horovod: a sum, not a mean of per-rank means: ranks hold different counts.
    return hvd.allreduce(value, op=hvd.Sum, name=name)


def broadcast_variables(variables) -> None:
    # Horovod: start every replica from rank 0's weights and optimizer state (random init
    # or a restored checkpoint), otherwise the replicas drift apart from step one.
    hvd.broadcast_variables(variables, root_rank=0)


def broadcast_object(obj, name: str):
    # Horovod: rank 0 decides (resume epoch, run metadata); the others follow.
    return hvd.broadcast_object(obj, root_rank=0, name=name)


def allreduce_sum(array: np.ndarray, name: str) -> np.ndarray:
    """Element-wise sum over ranks of a numpy array (counts: TP/FP/FN, loss sums)."""
    # Horovod: metrics over all ranks come from summed counts, never averaged ratios.
    tensor = tf.convert_to_tensor(np.asarray(array, dtype=np.float64))
    return hvd.allreduce(tensor, op=hvd.Sum, name=name).numpy()


def allgather(array: np.ndarray, name: str) -> np.ndarray:
    """Concatenate every rank's rows in rank order (rows may differ between ranks)."""
    # Horovod: evaluation gathers scores to compute threshold-free metrics (mAP).
    return hvd.allgather(tf.convert_to_tensor(array), name=name).numpy()


def barrier() -> None:
    # Horovod: a tiny allreduce makes every rank wait for the slowest (e.g. before timing).
    hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name="barrier")


class _RankFilter(logging.Filter):
    """Adds the ``[rank r/n]`` prefix; read at emit time so it follows elastic resizes."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.rank_prefix = f"[rank {hvd.rank()}/{hvd.size()}]"
        except ValueError:  # Horovod not initialised (yet, or any more)
            record.rank_prefix = "[rank -/-]"
        return True


def setup_logging(level: int = logging.INFO) -> None:
    """Log lines '<time> [rank r/n] message' on stderr, once per process."""
    if any(isinstance(f, _RankFilter) for h in log.handlers for f in h.filters):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RankFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(rank_prefix)s %(message)s", "%H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def raise_if_any_failed(
    error: Exception | None, what: str, *, others: type[Exception] | None = None
) -> None:
    """Collective: every rank raises if any rank hit ``error`` while doing ``what`` (the
    others raise ``others``: by default DistributedError, exit 2 - set-up problems).

    Set-up failures are often local (one rank's shard is corrupt); without agreeing,
    the healthy ranks would wait forever in the next collective.
    """
    # Horovod: a one-number allreduce tells every rank whether some rank failed.
    failed = allreduce_sum(np.array([0.0 if error is None else 1.0]), name=f"failed_{what}")[0]
    if error is not None:
        raise error
    if failed:
        kind = others or DistributedError
        raise kind(f"{int(failed)} other rank(s) failed while {what}; see their log")


class PeerLost(RunFailed):
    """Another rank ended during a collective (killed, crashed): this one cannot go on."""


# Horovod: when a peer dies, the collective in flight on the others fails with Gloo's
# transport error (the socket to the dead peer was reset or closed), and the ones after it
# with "Horovod has been shut down" - which of the two a rank sees is a matter of timing.
_PEER_GONE = re.compile(
    r"Horovod has been shut down|gloo/transport/.*(Read|Write) error|"
    r"Connection (reset|closed) by peer"
)


def peer_lost(err: Exception) -> PeerLost | None:
    """A :class:`PeerLost` naming this rank if ``err`` is Horovod's shutdown after another
    rank ended (fixed-size runs; elastic runs recover from it instead), else None."""
    if not isinstance(err, tf.errors.OpError) or not _PEER_GONE.search(str(err)):
        return None
    return PeerLost(
        f"rank {rank()}/{size()}: another rank ended during a collective (Horovod shut "
        "down; the launcher's log names it); the last checkpoint is kept, rerun to resume"
    )


def allgather_object(obj, name: str) -> list:
    """Every rank's picklable ``obj`` (e.g. a list of patch names), as a list in rank order."""
    # Horovod: strings cannot travel in a tensor allgather; evaluation gathers patch names so
    # rank 0 can check that every sample of the split was scored exactly once.
    return hvd.allgather_object(obj, name=name)


def average_in_place(variables: list, name: str) -> None:
    """Replace each variable by its mean over ranks (BatchNorm moving statistics).

    Gradients are averaged every step, but BatchNorm's moving mean/variance are updated
    from each rank's local batches and drift apart; averaging them once per epoch keeps
    every replica identical, so validation counts and rank 0's checkpoint describe one
    model whose statistics saw all the data.
    """
    if not variables or hvd.size() == 1:
        return
    # Horovod: one grouped allreduce for all the statistics of the model.
    means = hvd.grouped_allreduce([v.read_value() for v in variables], op=hvd.Average, name=name)
    for variable, mean in zip(variables, means):
        variable.assign(mean)


def elastic_state(model, optimizer, **attrs):
    """The state Elastic Horovod keeps in host memory: model, optimizer and ``attrs``."""
    # Horovod: commit() copies this state and checks for host changes; after a worker is
    # lost it is restored from the last commit, after any reset it is broadcast from rank 0.
    return hvd.elastic.TensorFlowKerasState(model, optimizer, **attrs)


def commit(state, before_reset: Callable[[bool], None]) -> None:
    """Commit the elastic ``state``. When the driver found hosts added or gone, every worker
    learns it at this same commit and ``before_reset(removed)`` runs on each before the
    reset: a world that never comes back from it (discovery listing no hosts for longer
    than the elastic timeout: the driver ends the workers inside the reset) has saved first."""
    try:
        state.commit()
    except HostsUpdatedInterrupt as interrupt:
        # Horovod: commit() broadcasts the driver's news, so all workers raise here together;
        # skip_sync is set when hosts were only removed.
        before_reset(bool(interrupt.skip_sync))
        raise


def elastic_run(func):
    """Wrap ``func(state)`` so that it is re-entered after every reset of the world."""

    def translated(state):
        try:
            return func(state)
        except tf.errors.OpError as err:
            raise elastic_failure(err) from err

    # Horovod: catches worker failures and host updates, re-initialises Horovod with the
    # new set of workers, runs the reset callbacks, syncs the state, and calls func again.
    return hvd.elastic.run(translated)


def elastic_failure(err: tf.errors.OpError) -> Exception:
    """What an op error inside the elastic function becomes: HorovodInternalError (reset the
    world, roll back to the last commit) when a collective failed, else RunFailed (exit 1).

    Never the OpError itself: Horovod 0.28's TF wrapper recognises a failed collective by
    "HorovodAllreduce/Allgather/Broadcast" in the message and SILENTLY RETURNS on any other
    UnknownError. A collective inside a tf.function is reported by its node name (ours:
    ``grad_3``), so a survivor whose allreduce read Gloo's "Connection reset by peer"
    ended its training "successfully" (CI, a worker killed mid-step)."""
    if "Horovod" in err.message or _PEER_GONE.search(str(err)):
        return HorovodInternalError(err)
    return RunFailed(first_line(err))
