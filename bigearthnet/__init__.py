"""bigearthnet-hpc: BigEarthNet data side and the shared machinery of training at scale.

Module map: ``docs/ARCHITECTURE.md``. Domain constants live in :mod:`bigearthnet.core.constants`
only.
"""

import importlib.util
import os

# Keras 2 on every supported stack. TensorFlow 2.16+ make Keras 3 their tf.keras unless
# TF_USE_LEGACY_KERAS=1 is set before TensorFlow loads Keras, which then loads tf-keras; the
# 2.18 stack installs tf-keras for that (Horovod 0.28.1 and this project need Keras 2). On
# 2.15 tf.keras is Keras 2 already, and the variable would make it look for tf-keras, so it
# is set exactly when tf-keras is installed (and cleared where it is not: a 2.18 process may
# hand its environment to a 2.15 one) - by the package, so no user shell must.
if importlib.util.find_spec("tf_keras") is not None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
else:
    os.environ.pop("TF_USE_LEGACY_KERAS", None)

__version__ = "0.1.0"
