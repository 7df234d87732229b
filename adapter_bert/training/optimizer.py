"""Google BERT's fine-tuning optimiser on the tf-keras `AdamW`.

Google's recipe (google-research/bert `optimization.py`): linear warmup then linear decay
to 0 (`WarmupLinearDecay`); Adam with epsilon 1e-6 and no bias correction plus decoupled
weight decay, none on LayerNorms and biases; gradients clipped to a global norm of 1.0.
`BertAdamW(bias_correction=False)` matches it exactly; `True` is Keras' `AdamW`.

`choose_optimizer` picks by tuning mode: full and top-k fine-tuning keep Google's optimizer
at 5e-5; parameter-efficient modes default to 1e-3 with epsilon 1e-8 and the uncorrected
step's early overshoot held under `STEP_CEILING` (above it the step is bias-corrected and
the warmup longer, `ceiling_warmup_steps`), because that overshoot at adapter rates
collapses training to the majority class (docs/results.md).
"""

import dataclasses
from typing import Dict, Optional, Sequence

import tensorflow as tf
import tf_keras as keras
from adapter_bert.errors import UserError

# Variables whose names match any of these (`re.search`, as Keras and Google's
# optimiser both do) get no weight decay. "bias" also matches the adapters'
# `biases1`/`biases2` and the heads' `output_bias`.
NO_DECAY_PATTERNS = ("LayerNorm", "layer_norm", "bias")

# Tuning modes that train a few new or small weights at adapter-sized learning rates.
PARAMETER_EFFICIENT_MODES = ("adapter", "layernorm")
# Adam's epsilon: Google's BERT optimizer uses 1e-6. Adapter weights get gradients of
# about 1e-6 (their size times the other projection's), so next to an epsilon of 1e-6
# their steps shrink to a fraction of the learning rate that differs from weight to
# weight; the bias-corrected variant uses PyTorch AdamW's 1e-8, under which every weight
# steps by about the learning rate (docs/results.md, "Learning rates, seeds and the
# optimizer").
GOOGLE_EPSILON = 1e-6
CORRECTED_EPSILON = 1e-8
# The highest rate the parameter-efficient modes' default optimizer lets Google's overshoot
# reach (times the schedule's shape). Adapters train well with bias-corrected Adam between
# 1e-3 and 3e-3 and collapse at 1.2e-2 on MRPC and SQuAD; at 2e-3 the ceiling leaves
# Google's rule untouched at the original's 3e-4 (its overshoot peaks at 6.57 < 2e-3 / 3e-4)
# and holds 1e-3 to at most twice its bias-corrected step (docs/results.md, "Learning
# rates, seeds and the optimizer").
STEP_CEILING = 2e-3
# Google's fine-tuning rate (its scripts' --learning_rate default), and the rate the
# parameter-efficient modes use when no --learning_rate is given.
FINE_TUNING_LEARNING_RATE = 5e-5
ADAPTER_LEARNING_RATE = 1e-3


def adam_step_multiplier(step: int, beta_1: float = 0.9, beta_2: float = 0.999) -> float:
    """How much larger Google's uncorrected update is than the bias-corrected one at `step`.

    `(1 - beta_1**t) / sqrt(1 - beta_2**t)`: 3.16 at t = 1, 6.5 around t = 10, 3.2 at
    t = 100, 1.86 at t = 343 (3 MRPC epochs at batch 32), 1.0 in the limit.
    """
    if step < 1:
        raise UserError(f"step counts from 1, got {step}")
    return (1.0 - beta_1 ** step) / (1.0 - beta_2 ** step) ** 0.5


def ceiling_scale(overshoot, peak: float, ceiling: float):
    """Factor on Google's uncorrected step under `ceiling` (`BertAdamW(step_ceiling=...)`).

    Google's step at peak rate `peak` is the bias-corrected one times `overshoot`
    (`adam_step_multiplier`). The overshoot is allowed up to `ceiling / peak`, never
    below 1: so at `peak >= ceiling` the step is exactly the bias-corrected one, and at
    `peak <= ceiling / overshoot` exactly Google's. Works on floats and tensors.
    """
    allowed = max(1.0, ceiling / peak)
    if isinstance(overshoot, (int, float)):
        return min(1.0, allowed / overshoot)
    return tf.minimum(tf.ones_like(overshoot), allowed / overshoot)


def ceiling_warmup_steps(warmup_steps: int, total_steps: int, peak: float,
                         ceiling: Optional[float]) -> int:
    """Warmup steps under a step ceiling: above it, the rate climbs at the ceiling's slope.

    Google's warmup takes the rate from 0 to `peak` in `warmup_steps`. With `peak` above
    `ceiling` the warmup lasts `peak / ceiling` times as long (at most `total_steps`), so
    the rate rises per step no faster than in a run at `ceiling`, then peaks at `peak`
    as asked: at 3e-3 under a 2e-3 ceiling, 15% of the run instead of 10%. Without a
    ceiling, at or below it, and with no warmup, Google's warmup is unchanged.
    """
    if ceiling is None or peak <= ceiling or not warmup_steps:
        return int(warmup_steps)
    return min(int(total_steps), int(round(warmup_steps * peak / ceiling)))


@dataclasses.dataclass(frozen=True)
class OptimizerChoice:
    """A run's learning rate and Adam variant, and whether each was given or defaulted."""

    tuning_mode: str
    learning_rate: float
    bias_correction: bool
    learning_rate_given: bool
    bias_correction_given: bool
    epsilon: float = GOOGLE_EPSILON
    epsilon_given: bool = False
    adapter_learning_rate: Optional[float] = None
    step_ceiling: Optional[float] = None

    @property
    def peak_rate(self) -> float:
        """The highest peak rate any weight trains at (the adapters' own, if higher)."""
        return max(self.learning_rate, self.adapter_learning_rate or 0.0)

    def warmup_steps(self, warmup_steps: int, total_steps: int) -> int:
        """The run's warmup: Google's, lengthened when `peak_rate` is above the step
        ceiling (`ceiling_warmup_steps`)."""
        return ceiling_warmup_steps(warmup_steps, total_steps, self.peak_rate,
                                    self.step_ceiling)

    def summary(self) -> str:
        """The short log line (under 120 characters): Adam variant, rates, epsilon;
        "(default)" marks what the tuning mode chose. `describe` says more."""
        if self.step_ceiling is not None:
            adam = f"Google's AdamW, step ceiling {self.step_ceiling:g}"
        elif self.bias_correction:
            adam = "bias-corrected AdamW"
        else:
            adam = "Google's uncorrected AdamW"
        if not self.bias_correction_given:
            adam += " (default)"
        rate = f"learning rate {self.learning_rate:g}"
        if not self.learning_rate_given:
            rate += " (default)"
        if self.adapter_learning_rate is not None:
            rate += f", adapters {self.adapter_learning_rate:g}"
        return f"Optimizer: {adam}, {rate}, epsilon {self.epsilon:g}"

    def describe(self) -> str:
        """The long line naming the rate, the Adam variant and where each came from, with
        the flags that change them (logged at debug level)."""
        rate = f"learning rate {self.learning_rate:g}"
        if not self.learning_rate_given:
            rate += f" (default for --tuning_mode={self.tuning_mode}; --learning_rate sets it)"
        if self.step_ceiling is not None:
            adam = (f"Google's AdamW without bias correction, its overshoot held to a rate of "
                    f"{self.step_ceiling:g} (default for --tuning_mode={self.tuning_mode}; "
                    "--noadam_bias_correction restores Google's uncorrected AdamW, "
                    "--adam_bias_correction gives bias-corrected AdamW)")
        elif self.bias_correction:
            adam = "bias-corrected AdamW"
            if not self.bias_correction_given:
                adam += (f" (default for --tuning_mode={self.tuning_mode}; "
                         "--noadam_bias_correction restores Google's uncorrected AdamW)")
        else:
            adam = "Google's AdamW without bias correction"
            if not self.bias_correction_given:
                adam += (f" (default for --tuning_mode={self.tuning_mode}; "
                         "--adam_bias_correction corrects it)")
        epsilon = f"epsilon {self.epsilon:g}"
        if not self.epsilon_given:
            epsilon += (" (default for this Adam variant; --adam_epsilon sets it)"
                        if self.bias_correction or self.step_ceiling is not None else "")
        adapters = ""
        if self.adapter_learning_rate is not None:
            adapters = (f", adapters at learning rate {self.adapter_learning_rate:g} "
                        "(--adapter_learning_rate)")
        return f"Optimizer: {adam}, {rate}{adapters}, {epsilon}"


def choose_optimizer(tuning_mode: str, learning_rate: Optional[float] = None,
                     bias_correction: Optional[bool] = None,
                     epsilon: Optional[float] = None,
                     adapter_learning_rate: Optional[float] = None) -> OptimizerChoice:
    """The learning rate, Adam variant and epsilon of a run; None means "the default".

    Parameter-efficient modes default to `ADAPTER_LEARNING_RATE` and Google's uncorrected
    Adam under `STEP_CEILING`; the others to Google's optimizer at
    `FINE_TUNING_LEARNING_RATE`. `bias_correction` given picks Keras' Adam (True) or
    Google's exactly (False) in every mode; epsilon defaults to the variant's (1e-6 for
    Google's, `CORRECTED_EPSILON` otherwise). `adapter_learning_rate` gives the adapters
    their own rate. Explicit values always win.
    """
    efficient = tuning_mode in PARAMETER_EFFICIENT_MODES
    default_rate = ADAPTER_LEARNING_RATE if efficient else FINE_TUNING_LEARNING_RATE
    corrected = bool(bias_correction)
    ceiling = STEP_CEILING if efficient and bias_correction is None else None
    googles = not corrected and ceiling is None
    default_epsilon = GOOGLE_EPSILON if googles else CORRECTED_EPSILON
    return OptimizerChoice(
        tuning_mode=tuning_mode,
        learning_rate=float(default_rate if learning_rate is None else learning_rate),
        bias_correction=corrected,
        learning_rate_given=learning_rate is not None,
        bias_correction_given=bias_correction is not None,
        epsilon=float(default_epsilon if epsilon is None else epsilon),
        epsilon_given=epsilon is not None,
        adapter_learning_rate=(None if adapter_learning_rate is None
                               else float(adapter_learning_rate)),
        step_ceiling=ceiling)


def warmup_then_decay(step, peak: float, total, warmup) -> tf.Tensor:
    """Google BERT's rate at `step` of `total` with `warmup` steps (float32):
    `peak * step / warmup` while `step < warmup`, else `peak * (1 - min(step, total) /
    total)`."""
    # The optimiser's `iterations` is int64; float32 counts steps exactly up to 2**24,
    # far beyond any fine-tuning run.
    step = tf.cast(step, tf.float32)
    peak = tf.constant(peak, tf.float32)
    total, warmup = tf.cast(total, tf.float32), tf.cast(warmup, tf.float32)
    decayed = peak * (1.0 - tf.minimum(step, total) / tf.maximum(total, 1.0))
    return tf.where(step < warmup, peak * step / tf.maximum(warmup, 1.0), decayed)


@keras.utils.register_keras_serializable(package="adapter_bert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Google BERT's learning rate: linear warmup, then linear decay to 0.

    At step `s` of `T`, with `W` warmup steps: `peak * s / W` while `s < W`, else
    `peak * (1 - min(s, T) / T)`, exactly as Google's code (so with warmup the rate peaks
    just under `peak`). Raises ValueError when `total_steps <= 0` or `warmup_steps < 0`.
    """

    def __init__(self, peak: float, total_steps: int, warmup_steps: int = 0,
                 name: Optional[str] = None):
        super().__init__()
        if int(total_steps) <= 0:
            raise UserError(f"total_steps must be positive, got {total_steps}")
        if int(warmup_steps) < 0:
            raise UserError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.name = name

    def __call__(self, step):
        with tf.name_scope(self.name or "WarmupLinearDecay"):
            return warmup_then_decay(step, self.peak, float(self.total_steps),
                                     float(self.warmup_steps))

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps, "name": self.name}


@keras.utils.register_keras_serializable(package="adapter_bert")
class PlannedWarmupDecay(WarmupLinearDecay):
    """`WarmupLinearDecay` whose step counts are set by `plan` when training starts
    (`TextClassifier.fit` plans each fit from its data) instead of when it is made, so
    one optimizer serves fits of any length; unplanned, the rate is `peak`.
    """

    def __init__(self, peak: float, total_steps: int = 0, warmup_steps: int = 0,
                 name: Optional[str] = None):
        keras.optimizers.schedules.LearningRateSchedule.__init__(self)
        self.peak, self.name = float(peak), name
        # Variables, read by every traced step: a later plan needs no retracing.
        self._steps = tf.Variable([float(total_steps), float(warmup_steps)], trainable=False,
                                  name="planned_steps")

    def plan(self, total_steps: int, warmup_steps: int) -> None:
        """Warmup over `warmup_steps`, then decay to 0 at `total_steps` (> 0)."""
        if int(total_steps) <= 0 or not 0 <= int(warmup_steps) <= int(total_steps):
            raise UserError(f"a schedule needs 0 <= warmup_steps <= total_steps and "
                            f"total_steps > 0, got {warmup_steps} and {total_steps}")
        self._steps.assign([float(total_steps), float(warmup_steps)])

    @property
    def total_steps(self) -> int:
        return int(self._steps[0].numpy())

    @property
    def warmup_steps(self) -> int:
        return int(self._steps[1].numpy())

    def __call__(self, step):
        with tf.name_scope(self.name or "PlannedWarmupDecay"):
            total, warmup = tf.unstack(tf.convert_to_tensor(self._steps))
            return tf.where(total > 0, warmup_then_decay(step, self.peak, total, warmup),
                            tf.constant(self.peak, tf.float32))


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertAdamW(keras.optimizers.AdamW):
    """Keras `AdamW` that can drop Adam's bias correction, as Google BERT's optimiser.

    Keras' decoupled decay equals Google's `param -= lr * (update + wd * param)`; clipping,
    distribution and serialisation are Keras'. `bias_correction=False` is Google's rule `m /
    (sqrt(v) + eps)`. `no_decay_patterns` (regular expressions) are kept in the config,
    unlike `exclude_from_weight_decay`. `rate_factors` maps variable names to multiples of
    the rate (a PyTorch parameter group). `step_ceiling` holds the uncorrected rule's
    overshoot to that rate (`ceiling_scale`). Other arguments go to
    `keras.optimizers.AdamW`; `amsgrad=True` needs bias correction.
    """

    def __init__(self, learning_rate=0.001, weight_decay=0.01, bias_correction=False,
                 no_decay_patterns: Sequence[str] = (),
                 rate_factors: Optional[Dict[str, float]] = None,
                 step_ceiling: Optional[float] = None, name="BertAdamW", **kwargs):
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay,
                         name=name, **kwargs)
        if self.amsgrad and not bias_correction:
            raise UserError("amsgrad is only supported with bias_correction=True")
        self.rate_factors = {str(k): float(v) for k, v in (rate_factors or {}).items()}
        if self.amsgrad and self.rate_factors:
            raise UserError("amsgrad does not support rate_factors")
        self.bias_correction = bool(bias_correction)
        if step_ceiling is not None and (self.bias_correction or step_ceiling <= 0):
            raise UserError("step_ceiling needs bias_correction=False and a positive value, "
                            f"got {step_ceiling}")
        self.step_ceiling = None if step_ceiling is None else float(step_ceiling)
        self.no_decay_patterns = tuple(no_decay_patterns)
        if self.no_decay_patterns:
            self.exclude_from_weight_decay(var_names=list(self.no_decay_patterns))

    def update_step(self, gradient, variable):
        """Applies one Adam step to `variable` (weight decay is already applied).

        Args:
            gradient: the (clipped) gradient, dense or `tf.IndexedSlices`.
            variable: the model variable to update.
        """
        factor = self._rate_factor(variable)
        # At or above the ceiling the overshoot is held to nothing: Keras' corrected rule.
        corrected = self.bias_correction or (
            self.step_ceiling is not None and self._peak_rate() * factor >= self.step_ceiling)
        if corrected and factor == 1.0:
            return super().update_step(gradient, variable)
        dtype = variable.dtype
        lr = tf.cast(self.learning_rate, dtype)
        if factor != 1.0:
            lr = lr * factor
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        if corrected:
            # Keras' rule: the rate absorbs both corrections, epsilon stays uncorrected.
            step = tf.cast(self.iterations + 1, dtype)
            lr = lr * tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step))
        elif self.step_ceiling is not None:
            step = tf.cast(self.iterations + 1, dtype)
            overshoot = (1 - tf.pow(beta_1, step)) / tf.sqrt(1 - tf.pow(beta_2, step))
            lr = lr * ceiling_scale(overshoot, self._peak_rate() * factor, self.step_ceiling)
        index = self._index_dict[self._var_key(variable)]
        m, v = self._momentums[index], self._velocities[index]
        if isinstance(gradient, tf.IndexedSlices):
            # Decay all rows, then add the new gradient rows: the same result as
            # the dense rule without materialising a dense gradient.
            m.assign(m * beta_1)
            m.scatter_add(tf.IndexedSlices(gradient.values * (1 - beta_1), gradient.indices))
            v.assign(v * beta_2)
            v.scatter_add(tf.IndexedSlices(tf.square(gradient.values) * (1 - beta_2),
                                           gradient.indices))
        else:
            m.assign(beta_1 * m + (1 - beta_1) * gradient)
            v.assign(beta_2 * v + (1 - beta_2) * tf.square(gradient))
        variable.assign_sub(lr * m / (tf.sqrt(v) + tf.cast(self.epsilon, dtype)))

    def _peak_rate(self) -> float:
        """The schedule's peak (or the constant rate)."""
        rate = self._learning_rate
        if isinstance(rate, WarmupLinearDecay):
            return rate.peak
        with tf.init_scope():  # a constant rate: its value when the step is traced
            return float(rate.numpy() if hasattr(rate, "numpy") else rate)

    def _rate_factor(self, variable) -> float:
        """The multiple of the learning rate `variable` trains at (1.0 unless listed)."""
        return self.rate_factors.get(variable.name, 1.0)

    def _apply_weight_decay(self, variables):
        """Keras' decoupled decay, at each variable's own rate when `rate_factors` is set."""
        if not self.rate_factors or self.weight_decay is None:
            return super()._apply_weight_decay(variables)
        for variable in variables:
            if self._use_weight_decay(variable):
                lr = tf.cast(self.learning_rate, variable.dtype) * self._rate_factor(variable)
                variable.assign_sub(variable * tf.cast(self.weight_decay, variable.dtype) * lr)

    def get_config(self):
        config = super().get_config()
        config.update(bias_correction=self.bias_correction,
                      no_decay_patterns=list(self.no_decay_patterns),
                      rate_factors=dict(self.rate_factors), step_ceiling=self.step_ceiling)
        return config


def create_optimizer(learning_rate: float, num_train_steps: Optional[int], num_warmup_steps: int,
                     weight_decay: float = 0.01, epsilon: float = 1e-6, beta_1: float = 0.9,
                     beta_2: float = 0.999, clip_norm: Optional[float] = 1.0,
                     bias_correction: bool = False,
                     rate_factors: Optional[Dict[str, float]] = None,
                     step_ceiling: Optional[float] = None) -> BertAdamW:
    """Google BERT's fine-tuning optimiser as a tf-keras `AdamW` (`BertAdamW`).

    The rate warms up linearly over `num_warmup_steps` and reaches 0 at `num_train_steps`
    (`WarmupLinearDecay`; `num_train_steps` None: `PlannedWarmupDecay`); weight decay skips LayerNorms and biases; gradients are clipped
    to `clip_norm` (None or 0: not clipped). `bias_correction=False` reproduces Google's
    optimiser exactly; `rate_factors` and `step_ceiling` as in `BertAdamW` (the warmup is
    taken as given: the runners lengthen it above the ceiling, `ceiling_warmup_steps`).
    """
    schedule = PlannedWarmupDecay(learning_rate) if num_train_steps is None else \
        WarmupLinearDecay(learning_rate, num_train_steps, num_warmup_steps)
    return BertAdamW(learning_rate=schedule, weight_decay=weight_decay,
                     bias_correction=bias_correction, no_decay_patterns=NO_DECAY_PATTERNS,
                     beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                     global_clipnorm=clip_norm or None, rate_factors=rate_factors,
                     step_ceiling=step_ceiling)
