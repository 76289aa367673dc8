#!/usr/bin/env bash
# Print the TensorFlow stack `make setup` builds for $PYTHON: 2.15 (TensorFlow 2.15, Keras 2,
# NumPy 1) or 2.18 (TensorFlow 2.18 + tf-keras 2.18, NumPy 2). Horovod 0.28.1 builds against
# both and against nothing newer (TF 2.19 moved the XLA headers it compiles with).
#   Python 3.9-3.11: 2.15 by default, TF_STACK=2.18 on request
#   Python 3.12:     2.18 (TF 2.15 has no wheel for it)
# Any other Python: one line on stderr saying which work, exit 2.
set -euo pipefail
PYTHON=${PYTHON:-python3}
if ! version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); then
  echo "setup: '$PYTHON' not found; install Python 3.9-3.12 (uv python install 3.12, pyenv install 3.12, or the cluster's python module) and run PYTHON=python3.12 make setup" >&2
  exit 2
fi
case "$version" in
  3.9 | 3.10 | 3.11) default=2.15 allowed="2.15 2.18" ;;
  3.12) default=2.18 allowed="2.18" ;;
  *)
    echo "setup: Python $version cannot run this project (TensorFlow 2.15/2.18 + Horovod 0.28.1 need Python 3.9-3.12): install one (uv python install 3.12, pyenv install 3.12, or the cluster's python module) and run PYTHON=python3.12 make setup" >&2
    exit 2
    ;;
esac
stack=${TF_STACK:-$default}
case " $allowed " in
  *" $stack "*) echo "$stack" ;;
  *)
    echo "setup: TF_STACK=$stack is not available with Python $version (choose from: $allowed)" >&2
    exit 2
    ;;
esac
