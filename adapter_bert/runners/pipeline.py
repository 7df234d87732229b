"""The input pipeline both runners share: feature cache, batch layout, XLA choice.

`InputPipeline.for_run` reads `--padding`, `--feature_cache_dir` and `--jit_compile`
once; the runners then ask it for cached features, the training dataset and
predictions, so GLUE and SQuAD batch the same way.
"""

import dataclasses
import functools
from typing import Callable, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from adapter_bert.data.batching import (example_lengths, predict_features, training_batch_plan,
                                   training_dataset)
from adapter_bert.data.feature_cache import FeatureCache
from adapter_bert.io_utils import file_digest
from adapter_bert.training import preemption
from adapter_bert.training.loop import KerasProgress


def resolve_jit_compile(flag: str, strategy) -> bool:
    """Whether to XLA-compile the train and predict steps.

    "auto" keeps XLA off on CPUs and GPUs: on the 2-core CPU it measured slower than
    plain TensorFlow (bench/speed.py), and with dynamic padding every new batch width
    costs an XLA compilation. TPUs compile with XLA whatever the flag says.
    """
    if flag == "auto":
        return False
    return flag == "true"


@dataclasses.dataclass
class InputPipeline:
    """How a run batches its features.

    `dynamic`: pad each batch to its widest example (CPU/GPU, --padding=dynamic);
    `static_shapes`: full batches only (TPU); `cache`, `vocab_file` and `do_lower_case` key
    the feature cache; `jit_compile`: XLA for the Keras steps.
    """

    dynamic: bool
    static_shapes: bool
    cache: FeatureCache
    vocab_file: str
    do_lower_case: bool
    jit_compile: bool = False

    @classmethod
    def for_run(cls, flag_values, backbone, static_shapes: bool, strategy,
                write_dir: Optional[str] = None) -> "InputPipeline":
        """Builds the pipeline from parsed flags, the backbone and the device.

        The default feature cache lies in `write_dir` (default --output_dir; a worker
        that is not the chief keeps its own in its temporary directory).
        """
        dynamic = flag_values.padding == "dynamic" and not static_shapes
        if flag_values.padding == "dynamic" and static_shapes:
            logging.info("Fixed batch shapes on this device: --padding=dynamic does not apply")
        return cls(dynamic=dynamic, static_shapes=static_shapes,
                   cache=FeatureCache.for_run(flag_values.feature_cache_dir,
                                              write_dir or flag_values.output_dir),
                   vocab_file=backbone.files.vocab_file,
                   do_lower_case=bool(flag_values.do_lower_case),
                   jit_compile=resolve_jit_compile(flag_values.jit_compile, strategy))

    @functools.cached_property
    def vocab_digest(self) -> str:
        return file_digest(self.vocab_file)

    def cached_features(self, name: str, parts: dict, build: Callable):
        """Features for `name` from the cache, else `build()` (then stored)."""
        key = {"vocab": self.vocab_digest, "do_lower_case": self.do_lower_case, **parts}
        return self.cache.get_or_build(name, key, build)

    def training_data(self, features: Dict[str, np.ndarray], input_keys: Sequence[str],
                      label_keys: Sequence[str], batch_size: int, num_steps: int,
                      seed: int) -> Callable[[], tf.data.Dataset]:
        """A factory of the run's training batches (the same stream on every call).

        Google trains on full batches only (drop_remainder=True), on every device.
        """
        count = len(features[input_keys[0]])
        lengths = example_lengths(features) if self.dynamic else None
        plan = training_batch_plan(count, batch_size, num_steps, seed, lengths)
        if self.dynamic:
            widths = features["input_mask"][plan.reshape(-1)].sum(1).reshape(plan.shape)
            logging.info("Dynamic padding: mean batch width %.1f of %d", widths.max(1).mean(),
                         features[input_keys[0]].shape[1])
        return lambda: training_dataset(features, plan, input_keys, label_keys, self.dynamic)

    def predict(self, model, features: Dict[str, np.ndarray], input_keys: Sequence[str],
                batch_size: int, per_token_outputs: Sequence[str] = (),
                label: Optional[str] = None):
        """Model outputs for every example, in order (see `batching.predict_features`).

        `label` (e.g. "eval dev") shows the batches' progress under that name.

        Raises:
            preemption.Preempted: SIGTERM or SIGINT stopped the pass (after the batch in
                flight, at the same batch on every worker).
        """
        callbacks = []
        progress = None
        if label:
            batches = -(-len(features[input_keys[0]]) // batch_size)
            progress = KerasProgress(label, batches)
            callbacks.append(progress)
        # SIGTERM/SIGINT ends the pass after the batch in flight; nothing is written and the
        # next run does the pass again (`training.preemption`).
        phase = (label or "predict").replace("eval", "evaluating", 1).replace(
            "predict", "predicting", 1)
        stop = preemption.keras_stop_callback(phase, model.distribute_strategy)
        if stop is not None:
            callbacks.append(stop)
        try:
            with preemption.deferred(phase, f"stopped after {phase}, before writing its results"):
                return predict_features(model, features, input_keys, batch_size, self.dynamic,
                                        self.static_shapes, per_token_outputs,
                                        callbacks=callbacks)
        except preemption.Preempted:
            if progress is not None:
                progress.on_predict_end()  # ends a terminal's progress line before the message
            raise
