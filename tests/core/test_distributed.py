"""How a failed op inside the elastic function is translated (core/distributed.py)."""

from __future__ import annotations

import horovod.tensorflow as hvd
import pytest
import tensorflow as tf
from horovod.common.exceptions import HorovodInternalError

from bigearthnet.core import distributed
from bigearthnet.core.errors import RunFailed

# What TF 2.15 reported on a survivor in CI: the allreduce of a tf.function, named by its
# node (no "Horovod" anywhere), failed with Gloo's transport error when a peer was killed.
GLOO_RESET = (
    "Graph execution error:\n\nDetected at node grad_3 defined at (most recent call last):\n"
    "[/tmp/x/third_party/compatible17_gloo/gloo/transport/tcp/pair.cc:589] Read error "
    "[127.0.0.1]:2971: Connection reset by peer\n\t [[{{node grad_3}}]] "
    "[Op:__inference_train_step_4321]"
)


@pytest.mark.parametrize(
    "message",
    [
        GLOO_RESET,
        "Horovod has been shut down. This was caused by an exception",
        "x [Op:HorovodAllreduce]",
    ],
)
def test_a_failed_collective_resets_the_world(message: str) -> None:
    failure = distributed.elastic_failure(tf.errors.UnknownError(None, None, message))
    assert isinstance(failure, HorovodInternalError)


def test_any_other_op_error_fails_the_run_loudly() -> None:
    failure = distributed.elastic_failure(tf.errors.UnknownError(None, None, "bad kernel\nmore"))
    assert isinstance(failure, RunFailed) and str(failure) == "bad kernel"


def test_elastic_function_never_returns_silently_on_an_op_error() -> None:
    """Horovod's own wrapper returns None on an UnknownError it does not recognise: the run
    then 'finished' untrained. Through elastic_run it raises instead (exit 1). (Recovery from
    a lost peer needs a reset of a real world: tests/training/test_elastic.py.)"""
    distributed.init(threads=1)
    state = hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank, epoch=0)

    def train(_state) -> str:
        raise tf.errors.UnknownError(None, None, "bad kernel")

    with pytest.raises(RunFailed, match="bad kernel"):
        distributed.elastic_run(train)(state)
