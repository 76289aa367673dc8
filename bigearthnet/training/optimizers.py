"""The optimizers of ``--optimizer``: SGD and Adam (Keras), and AdamW, LARS and LAMB for
large global batches, written here as Keras legacy optimizers (the family Horovod 0.28's
Keras integration targets, checkpointed like the others). Which name builds which class,
and what each takes, is the table's (:mod:`bigearthnet.core.optimizer_table`).

========  ===========================================================================
sgd       SGD with momentum (the seed study); ``--weight-decay`` as an L2 loss term
adam      Adam; ``--weight-decay`` as an L2 loss term
adamw     Adam with decoupled weight decay (Loshchilov & Hutter 2019): the reBEN recipe
lars      SGD with momentum and a layer-wise trust ratio (You, Gitman & Ginsburg 2017)
lamb      AdamW with a layer-wise trust ratio (You et al. 2020, Algorithm 2)
========  ===========================================================================

For adamw, lars and lamb the weight decay is part of the update rule, not of the loss (the
model is built without a regulariser, :func:`decay_in_loss`). Following both papers'
reference code, variables of rank <= 1 (BatchNorm's scale and offset, biases) get neither
weight decay nor the trust ratio: their update is the plain momentum/Adam step. Where a
norm in the trust ratio is zero (a zero-initialised kernel, a zero gradient) the ratio is 1.

Every rank applies the update to the same allreduced gradient (:mod:`bigearthnet.training.replica`),
so the per-layer norms, and with them the replicas, stay identical.
"""

from __future__ import annotations

import tensorflow as tf

from bigearthnet.core.optimizer_table import OPTIMIZERS as TABLE

# Defaults from the papers: LARS's trust coefficient eta (You et al. 2017, Sec. 3); LAMB's
# epsilon (You et al. 2020, experiments: 1e-6) and Adam's betas.
LARS_TRUST_COEFFICIENT = 1e-3
BETA_1, BETA_2 = 0.9, 0.999
LAMB_EPSILON = 1e-6
ADAMW_EPSILON = 1e-8


CHOICES = tuple(TABLE)
# Keras's own, by the names the table gives them.
SGD = tf.keras.optimizers.legacy.SGD
Adam = tf.keras.optimizers.legacy.Adam


def decay_in_loss(optimizer: str) -> bool:
    """Whether ``--weight-decay`` is an L2 term of the loss (sgd, adam) rather than part of
    the optimizer's update (adamw, lars, lamb)."""
    return TABLE[optimizer].decay_in_loss


def make(
    name: str,
    *,
    learning_rate: tf.keras.optimizers.schedules.LearningRateSchedule | float,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    trust_coefficient: float = LARS_TRUST_COEFFICIENT,
) -> tf.keras.optimizers.legacy.Optimizer:
    """The optimizer ``name`` (one of :data:`CHOICES`), given the options its entry takes."""
    if name not in TABLE:
        raise ValueError(f"unknown optimizer {name!r}: one of {', '.join(CHOICES)}")
    entry = TABLE[name]
    options: dict = {"learning_rate": learning_rate}
    if entry.momentum:
        options["momentum"] = momentum
    if not entry.decay_in_loss:
        options["weight_decay"] = weight_decay
    if entry.trust_coefficient:
        options["trust_coefficient"] = trust_coefficient
    return globals()[entry.builder](**options)


def adapted(variable: tf.Variable) -> bool:
    """Whether weight decay and the trust ratio apply: kernels yes; BatchNorm parameters and
    biases (rank <= 1) no."""
    return variable.shape.rank is not None and variable.shape.rank > 1


def trust_ratio(numerator: tf.Tensor, denominator: tf.Tensor) -> tf.Tensor:
    """``numerator / denominator``, or 1 where either is zero (the papers' convention: a
    zero-initialised layer or a zero gradient is not frozen or blown up)."""
    both = tf.logical_and(numerator > 0, denominator > 0)
    return tf.where(both, numerator / tf.where(both, denominator, 1.0), 1.0)


class AdamW(tf.keras.optimizers.legacy.Optimizer):
    """Adam with bias-corrected moments and decoupled weight decay::

        m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
        u = m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd w      (wd only where adapted(w))
        w = w - lr * ratio * u

    with ``ratio`` 1 (AdamW); :class:`LAMB` sets it per layer.
    """

    _HAS_AGGREGATE_GRAD = True
    _HYPERS = ("learning_rate", "weight_decay", "beta_1", "beta_2")
    default_epsilon = ADAMW_EPSILON

    def __init__(
        self,
        learning_rate: tf.keras.optimizers.schedules.LearningRateSchedule | float = 1e-3,
        *,
        weight_decay: float = 0.0,
        beta_1: float = BETA_1,
        beta_2: float = BETA_2,
        epsilon: float | None = None,
        name: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(name or type(self).__name__, **kwargs)
        self._set_hyper("learning_rate", learning_rate)
        self._set_hyper("weight_decay", weight_decay)
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self.epsilon = self.default_epsilon if epsilon is None else epsilon

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        for var in var_list:
            self.add_slot(var, "m")
        for var in var_list:
            self.add_slot(var, "v")

    def _resource_apply_dense(self, grad, var, apply_state=None):
        dtype = var.dtype.base_dtype
        lr = self._decayed_lr(dtype)
        b1, b2 = self._get_hyper("beta_1", dtype), self._get_hyper("beta_2", dtype)
        t = tf.cast(self.iterations + 1, dtype)  # iterations counts updates already made
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        m_t = m.assign(b1 * m + (1.0 - b1) * grad)
        v_t = v.assign(b2 * v + (1.0 - b2) * tf.square(grad))
        step = (m_t / (1.0 - tf.pow(b1, t))) / (tf.sqrt(v_t / (1.0 - tf.pow(b2, t))) + self.epsilon)
        if adapted(var):
            step = step + self._get_hyper("weight_decay", dtype) * var
            step = self._ratio(var, step) * step
        return var.assign_sub(lr * step)

    def _ratio(self, var: tf.Variable, step: tf.Tensor) -> tf.Tensor:
        return tf.constant(1.0, var.dtype.base_dtype)

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        raise NotImplementedError("sparse gradients: the models here have none")

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({n: self._serialize_hyperparameter(n) for n in self._HYPERS})
        config.update(epsilon=self.epsilon)
        return config


class LAMB(AdamW):
    """LAMB: the AdamW step ``u`` of each layer scaled by ``||w|| / ||u||`` (the trust ratio
    with the identity as scaling function), so every layer moves by ``lr`` times its own
    norm, whatever the scale of its gradients."""

    default_epsilon = LAMB_EPSILON

    def _ratio(self, var: tf.Variable, step: tf.Tensor) -> tf.Tensor:
        return trust_ratio(tf.norm(var), tf.norm(step))


class LARS(tf.keras.optimizers.legacy.Optimizer):
    """LARS (You et al. 2017, Algorithm 1)::

    local_lr = eta ||w|| / (||g|| + wd ||w||)          (1 where not adapted(w))
    v = momentum v + lr * local_lr * (g + wd w)       (wd only where adapted(w))
    w = w - v
    """

    _HAS_AGGREGATE_GRAD = True
    _HYPERS = ("learning_rate", "momentum", "weight_decay")

    def __init__(
        self,
        learning_rate: tf.keras.optimizers.schedules.LearningRateSchedule | float = 1.0,
        *,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float = LARS_TRUST_COEFFICIENT,
        name: str = "LARS",
        **kwargs,
    ) -> None:
        super().__init__(name, **kwargs)
        if trust_coefficient <= 0:
            raise ValueError(f"LARS trust coefficient must be > 0, got {trust_coefficient}")
        self._set_hyper("learning_rate", learning_rate)
        self._set_hyper("momentum", momentum)
        self._set_hyper("weight_decay", weight_decay)
        self.trust_coefficient = trust_coefficient

    def _create_slots(self, var_list: list[tf.Variable]) -> None:
        for var in var_list:
            self.add_slot(var, "momentum")

    def _resource_apply_dense(self, grad, var, apply_state=None):
        dtype = var.dtype.base_dtype
        lr = self._decayed_lr(dtype)
        local_lr = tf.constant(1.0, dtype)
        if adapted(var):
            decay = self._get_hyper("weight_decay", dtype)
            w_norm = tf.norm(var)
            local_lr = trust_ratio(self.trust_coefficient * w_norm, tf.norm(grad) + decay * w_norm)
            grad = grad + decay * var
        velocity = self.get_slot(var, "momentum")
        v_t = velocity.assign(self._get_hyper("momentum", dtype) * velocity + lr * local_lr * grad)
        return var.assign_sub(v_t)

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        raise NotImplementedError("sparse gradients: the models here have none")

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({n: self._serialize_hyperparameter(n) for n in self._HYPERS})
        config.update(trust_coefficient=self.trust_coefficient)
        return config
