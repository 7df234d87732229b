"""adapter-bert for TensorFlow 2: Houlsby bottleneck adapters on a tf-keras BERT.

The main names are importable from the package root; they are loaded on first use so
that `import adapter_bert` stays cheap (TensorFlow is imported only when needed).

Examples:
    >>> import adapter_bert as ab
    >>> model = ab.load_pretrained(head="classifier", num_labels=2)   # doctest: +SKIP
    >>> model.add_adapter("mrpc", ab.AdapterConfig(size=64))           # doctest: +SKIP
    >>> report = model.train_adapter("mrpc")                           # doctest: +SKIP
"""

import importlib
import importlib.machinery
import os
import sys

# TensorFlow 2.21 turns its oneDNN CPU kernels on by default only on CPUs with AVX-512
# deep-learning extensions. Without them (AVX2-only x86 CPUs) batched matmuls fall back
# to Eigen, which runs BERT's attention products several times slower and so an
# adapter-tuning step markedly slower (docs/performance.md).
# TensorFlow reads the switch once, while it loads, so it is set here, where importing
# any part of the package sets it before the package imports TensorFlow. An explicit
# TF_ENABLE_ONEDNN_OPTS (0 turns oneDNN off) is left as it is.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

__version__ = "0.1.0"

from adapter_bert import install_check as _install_check  # noqa: E402 (reads no metadata yet)

# The package root's names, by the module that defines them (loaded on first use).
_MODULE_EXPORTS = {
    "adapter_bert.model.config": ("BertConfig", "AdapterConfig", "ConfigError",
                                  "register_adapter_family", "unregister_adapter_family",
                                  "adapter_families"),
    "adapter_bert.metrics.keras_metrics": ("MacroF1", "MatthewsCorrelation", "PositiveClassF1",
                                           "OnPositiveClass", "PearsonCorrelation"),
    "adapter_bert.errors": ("UserError",),
    "adapter_bert.model.families": ("AdapterFamily", "AdapterOption"),
    "adapter_bert.model.adapter_layers": ("AdapterLayer", "ProjectionAdapter", "HoulsbyAdapter",
                                          "PfeifferAdapter", "ParallelAdapter", "LoraAdapter"),
    "adapter_bert.adapters.merging": ("merge_adapter", "unmerge_adapter", "adapter_merged"),
    "adapter_bert.adapters.fusion": ("AdapterFusion",),
    "adapter_bert.adapters.multitask": ("MultiAdapterModel",),
    "adapter_bert.adapters.files": ("backbone_fingerprint",),
    "adapter_bert.adapters.models": ("BertModel", "BertClassifier", "BertSpanModel",
                                     "load_pretrained", "load_adapter", "save_adapter"),
    "adapter_bert.model.heads": ("ClassifierHead", "SpanHead"),
    "adapter_bert.model.naming": ("tf1_variables",),
    "adapter_bert.model.checkpoints": ("load_weights", "default_backbone_dir",
                                       "save_tf1_checkpoint"),
    "adapter_bert.adapters.tuning": ("apply_tuning", "TUNING_MODES", "parameter_report",
                                     "parameter_summary"),
    "adapter_bert.serving": ("export_classifier", "export_multi_adapter", "export_tflite"),
    "adapter_bert.library.text_classifier": ("TextClassifier",),
    "adapter_bert.training.recipe": ("fine_tuning_optimizer",),
}
_EXPORTS = {name: module for module, names in _MODULE_EXPORTS.items() for name in names}

__all__ = sorted(_EXPORTS) + ["__version__"]


# Classes a Keras SavedModel names by their registered name ("adapter_bert>TextClassifier"):
# `tf_keras.models.load_model` finds them once the package is imported, without
# importing them (and TensorFlow) before they are needed.
_KERAS_CLASSES = ("TextClassifier", "MacroF1", "MatthewsCorrelation", "PositiveClassF1",
                  "OnPositiveClass", "PearsonCorrelation")


class _OnFirstUse:
    """Stands in Keras' registry for an exported class until a SavedModel needs it."""

    def __init__(self, name: str):
        self.name = name

    def from_config(self, config, custom_objects=None):
        return __getattr__(self.name).from_config(config)

    def __call__(self, *args, **kwargs):  # Keras instantiates some classes directly
        return __getattr__(self.name)(*args, **kwargs)


def _register_keras_classes(keras_module) -> None:
    registry = keras_module.utils.get_custom_objects()
    for name in _KERAS_CLASSES:
        registry.setdefault(f"adapter_bert>{name}", _OnFirstUse(name))


class _OnTensorFlowImport:
    """The package's one import hook, a `sys.meta_path` finder (for tf_keras it answers as
    the path finder would; for anything else it answers nothing). At the first import of
    `tensorflow` or `tf_keras` it checks their install (`install_check`: TensorFlow 2.20
    or 2.21 with the matching tf-keras, which pip does not add; a missing or mismatched
    one is one line naming the fix), and when tf_keras has loaded it registers
    `_KERAS_CLASSES`; then it removes itself."""

    checked = False

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102 (finder protocol)
        if fullname not in ("tensorflow", "tf_keras"):
            return None
        if not self.checked and not _install_check.in_progress():
            self.checked = True
            _install_check.check_tensorflow()
        if fullname != "tf_keras":
            return None
        # The path finder's spec, with a loader that registers the classes once tf_keras
        # has run. TensorFlow asks for tf_keras' spec only to find its folder and imports
        # it later, so the hook stays until the module really loads.
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            load = spec.loader.exec_module

            def exec_module(module):
                load(module)
                _register_keras_classes(module)
                if self in sys.meta_path:
                    sys.meta_path.remove(self)

            spec.loader.exec_module = exec_module
        return spec


if "tf_keras" in sys.modules:
    _install_check.check_tensorflow()
    _register_keras_classes(sys.modules["tf_keras"])
elif not any(isinstance(f, _OnTensorFlowImport) for f in sys.meta_path):
    _hook = _OnTensorFlowImport()
    if "tensorflow" in sys.modules:  # checked now, not again when tf_keras loads
        _install_check.check_tensorflow()
        _hook.checked = True
    sys.meta_path.insert(0, _hook)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'adapter_bert' has no attribute {name!r}")
