"""The optimizers ``train.py --optimizer`` offers, one entry each: what builds it and what
the rest of the project needs to know about it.

An entry names its builder, a class of :mod:`bigearthnet.training.optimizers` that is
imported only when a run builds the optimizer (TensorFlow), so the table answers on login
nodes: ``--optimizer``'s choices and help, the model's loss term (:attr:`~Optimizer.
decay_in_loss`), which options the builder takes, and the LR rule of the seed table's
column. Adding an optimizer is adding an entry here (and its NumPy transcription in
``tests/training/test_optimizers.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OPTIMIZERS", "Optimizer", "SEED_RULES", "with_property"]


@dataclass(frozen=True)
class Optimizer:
    """One optimizer of ``--optimizer``."""

    builder: str  # its class in bigearthnet.training.optimizers
    summary: str  # what it is, in --optimizer's help ("": its name says it)
    decay_in_loss: bool  # --weight-decay: an L2 term of the loss (True) or part of the update
    momentum: bool = False  # takes --momentum
    trust_coefficient: bool = False  # takes --trust-coefficient (a layer-wise trust ratio)
    # The LR scaling with the global batch the seed table runs it with: linear (Goyal et
    # al., from --sgd-lr) or sqrt (the root LAMB was tuned with, from --lamb-lr); None: no
    # column of the seed table.
    seed_rule: str | None = None


OPTIMIZERS: dict[str, Optimizer] = {
    "sgd": Optimizer(
        "SGD",
        "with momentum: the seed study",
        decay_in_loss=True,
        momentum=True,
        seed_rule="linear",
    ),  # fmt: skip
    "adam": Optimizer("Adam", "", decay_in_loss=True),
    "adamw": Optimizer("AdamW", "decoupled weight decay: the reBEN recipe", decay_in_loss=False),
    "lars": Optimizer(
        "LARS",
        "a layer-wise trust ratio for large global batches: You et al. 2017",
        decay_in_loss=False,
        momentum=True,
        trust_coefficient=True,
        seed_rule="linear",
    ),  # fmt: skip
    "lamb": Optimizer(
        "LAMB",
        "AdamW with a layer-wise trust ratio: You et al. 2020",
        decay_in_loss=False,
        seed_rule="sqrt",
    ),  # fmt: skip
}
"""Name -> optimizer; the names are ``--optimizer``'s choices."""

# Seed table columns: optimizer -> its LR scaling rule.
SEED_RULES = {name: o.seed_rule for name, o in OPTIMIZERS.items() if o.seed_rule is not None}


def with_property(flag: str, have: bool = True) -> str:
    """The optimizers that (``have``) or do not take an option or treat the decay so, by
    name: ``sgd/adam``; ``flag`` is an :class:`Optimizer` attribute."""
    return "/".join(n for n, o in OPTIMIZERS.items() if getattr(o, flag) == have)
