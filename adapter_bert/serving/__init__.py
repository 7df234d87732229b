"""Serving: trained models as SavedModels that take raw strings (see docs/serving.md).

- `export_classifier`: one task (what `run_classifier.py --export_dir` writes);
- `export_multi_adapter`: one frozen backbone with many task adapters, a task per row;
- `export_tflite`: a classifier's network (int32 features in) as TFLite builtins only;
- `BertInputEncoder`: Google BERT's tokenisation and input layout as TensorFlow ops.

tensorflow-text (the `[serving]` extra) is imported only when an encoder is built.
"""

from adapter_bert.serving.export import ExportError, export_classifier
from adapter_bert.serving.multi_adapter import export_multi_adapter
from adapter_bert.serving.tflite import export_tflite
from adapter_bert.serving.tokenizer import BertInputEncoder, VocabularyError

__all__ = ["BertInputEncoder", "ExportError", "VocabularyError", "export_classifier",
           "export_multi_adapter", "export_tflite"]
