"""Foundations every other package stands on: domain constants, errors and exit codes,
atomic files, the run configuration, signals, the one home of every Horovod call
(:mod:`~bigearthnet.core.distributed`) and the run folder's lock. No TensorFlow at import."""
