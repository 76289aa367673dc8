"""bigearthnet-hpc: BigEarthNet data side and the shared machinery of training at scale.

Module map: see ``docs/architecture.md`` in the shared docs (kept in README.md's
"Code map"). Domain constants live in :mod:`bigearthnet.constants` only.
"""

__version__ = "0.1.0"
