#!/usr/bin/env bash
# Build the project's virtual environment at $VENV (default .venv): one TensorFlow stack
# (STACK=2.15: TF 2.15, Keras 2, NumPy 1; STACK=2.18: TF 2.18 + tf-keras, NumPy 2; see
# scripts/stack.sh), the project in editable mode with its dev tools, then Horovod 0.28.1
# compiled against that TensorFlow with Gloo (and MPI when an MPI compiler wrapper is on PATH).
# Called by `make setup`, which only re-runs it when setup.cfg or this script changed.
set -euo pipefail

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
STACK=${STACK:-$(PYTHON=$PYTHON bash scripts/stack.sh)}
HOROVOD_VERSION=0.28.1
# GPU clusters: TF_DEVICE=cuda make setup (the stack's tensorflow[and-cuda] pin)
TF_DEVICE=${TF_DEVICE:-cpu}
# TF 2.16+ make Keras 3 their tf.keras; Horovod 0.28.1 and the project need Keras 2 (tf-keras).
# The project sets this itself when imported (bigearthnet/__init__.py); the build and the
# build check need it too - on 2.18 only: TF 2.15 without tf-keras breaks with it set.
if [ "$STACK" = 2.18 ]; then export TF_USE_LEGACY_KERAS=1; else unset TF_USE_LEGACY_KERAS; fi

log() { echo "[setup] $*"; }

# A venv whose pip no longer imports (seen once in CI: a pip self-upgrade cut short) is
# rebuilt rather than left to fail the same way on every later `make setup`.
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  log "$VENV has a broken pip: rebuilding it"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check "$@"; }

# cmake<4: Horovod 0.28.1's CMakeLists predate the policies CMake 4 removed.
if ! pip install -q --upgrade "pip>=23" "setuptools>=61" wheel "cmake<4" || ! pip --version >/dev/null; then
  log "upgrading pip failed: recreating $VENV once and retrying"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  pip install -q --upgrade "pip>=23" "setuptools>=61" wheel "cmake<4"
fi
log "stack $STACK ($TF_DEVICE) with $("$VENV/bin/python" --version)"
pip install -q -e ".[dev,$TF_DEVICE-$STACK]"

tf_version=$("$VENV/bin/python" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)
with_mpi=0
if command -v mpicxx >/dev/null 2>&1; then with_mpi=1; fi
# GPU clusters: HOROVOD_GPU_OPERATIONS=NCCL (read by Horovod's build) for NCCL allreduce.
gpu_ops=${HOROVOD_GPU_OPERATIONS:-none}

# Is a Horovod already built against this TensorFlow with the wanted controllers?
horovod_ok() {
  "$VENV/bin/python" - "$with_mpi" "$gpu_ops" <<'PY' 2>/dev/null
import sys
import horovod.tensorflow as hvd
want_mpi, want_nccl = sys.argv[1] == "1", sys.argv[2] == "NCCL"
ok = hvd.gloo_built() and (hvd.mpi_built() or not want_mpi) and (hvd.nccl_built() or not want_nccl)
sys.exit(0 if ok else 1)
PY
}

if horovod_ok; then
  log "horovod $HOROVOD_VERSION already built for TF $tf_version (mpi=$with_mpi)"
else
  # Wheels are cached per Python, TF version and controller set, so a fresh clone on the same
  # machine skips the ~3 minute compile, and an MPI install later triggers a rebuild.
  py_version=$("$VENV/bin/python" -c 'import sys; print("%d%d" % sys.version_info[:2])')
  wheel_dir=${HOROVOD_WHEEL_CACHE:-$HOME/.cache/bigearthnet-hpc}/horovod-$HOROVOD_VERSION-py$py_version-tf$tf_version-mpi$with_mpi-gpu$gpu_ops
  if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    log "compiling horovod $HOROVOD_VERSION against TF $tf_version (gloo, mpi=$with_mpi, gpu=$gpu_ops); takes a few minutes"
    mkdir -p "$wheel_dir"
    export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1
    export HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
    export CMAKE_POLICY_VERSION_MINIMUM=3.5
    MAKEFLAGS="-j$(nproc)"
    export MAKEFLAGS
    if [ "$with_mpi" = 1 ]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
    PATH="$PWD/$VENV/bin:$PATH" pip wheel -q --no-build-isolation --no-deps --no-cache-dir \
      -w "$wheel_dir" "horovod==$HOROVOD_VERSION"
  fi
  pip install -q --no-deps --force-reinstall "$wheel_dir"/horovod-*.whl
  # Horovod's runtime dependencies (cloudpickle, psutil, pyyaml, packaging, cffi).
  pip install -q "horovod==$HOROVOD_VERSION" --no-build-isolation
fi

"$VENV/bin/horovodrun" --check-build
