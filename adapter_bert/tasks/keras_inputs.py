"""What `TextClassifier`'s Keras methods are given, checked and read into lists: the
arguments `Model.fit` takes and those it does not, texts (single or pairs), labels,
weights, and `tf.data` datasets of raw strings. Each refusal is one line naming the
argument and what was expected.
"""

from typing import List, Sequence

import numpy as np
import tensorflow as tf

from adapter_bert.errors import UserError


# Keras `Model.fit` arguments this `fit` does not take, and why (one line each).
_NOT_TAKEN = {
    "steps_per_epoch": "an epoch is every text once (batch_size sets the steps)",
    "validation_steps": "the whole validation set is scored",
    "validation_batch_size": "validation runs at batch_size",
    "validation_freq": "every epoch is validated",
}


def refuse_other_arguments(method: str, kwargs: dict, allowed: Sequence[str] = ()) -> None:
    """One line naming a keyword argument `method` does not take (a typo trains nothing)."""
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        why = _NOT_TAKEN.get(unknown[0])
        raise UserError(f"{method}() got {unknown[0]}=, which it does not take"
                        + (f" ({why})" if why else "; see help(TextClassifier." + method + ")"))


def holds_features(x) -> bool:
    """Whether `x` is a tf.data.Dataset whose inputs are the features dict."""
    if not isinstance(x, tf.data.Dataset):
        return False
    spec = x.element_spec
    first = spec[0] if isinstance(spec, tuple) else spec
    return isinstance(first, dict) and "input_ids" in first


def materialised(x, y, weights, method: str):
    """(x, y, weights) with a dataset of raw strings read into lists: its elements are
    text or `(first, second)`, alone (predict) or with a label and a weight, batched or not."""
    if not isinstance(x, tf.data.Dataset):
        return x, y, weights
    if y is not None:
        raise UserError(f"{method}: y must be None when x is a dataset (its elements hold "
                        f"the labels)")
    spec = x.element_spec
    text = spec[0] if isinstance(spec, tuple) else spec
    one = text[0] if isinstance(text, tuple) else text
    if not isinstance(one, tf.TensorSpec) or one.dtype != tf.string:
        raise UserError(f"{method}: a dataset's elements must be texts, (text, label) or "
                        f"(text, label, weight) (a text may be a (first, second) pair); got "
                        f"{spec}")
    dataset = x.unbatch() if one.shape.rank else x
    columns: List[list] = []
    for element in dataset.as_numpy_iterator():
        element = element if isinstance(spec, tuple) else (element,)
        if not columns:
            columns = [[] for _ in element]
        for column, value in zip(columns, element):
            column.append(value)
    if not columns:
        return [], None, None
    texts = columns[0]
    if isinstance(text, tuple):
        texts = ([a for a, _ in texts], [b for _, b in texts])
    labels = columns[1] if len(columns) > 1 and method != "predict" else None
    return texts, labels, columns[2] if len(columns) > 2 else None


def split_off(x, y, weights, fraction: float):
    """Keras' validation_split: the last `fraction` of the rows, before any shuffling."""
    if not 0 < fraction < 1:
        raise UserError(f"validation_split={fraction}: expected a fraction between 0 and 1")
    count = len(x[0]) if isinstance(x, tuple) else len(x)
    cut = int(count * (1 - fraction))
    if not 0 < cut < count:
        raise UserError(f"validation_split={fraction} of {count} texts leaves no training or "
                        f"no validation row")

    def part(values, rows):
        if values is None:
            return None
        if isinstance(values, tuple):
            return tuple(list(v)[rows] for v in values)
        return list(values)[rows] if not isinstance(values, np.ndarray) else values[rows]

    head, tail = slice(0, cut), slice(cut, None)
    return (part(x, head), part(y, head), part(weights, head),
            (part(x, tail), part(y, tail), part(weights, tail)) if weights is not None
            else (part(x, tail), part(y, tail)))


def whole_epochs(epochs, initial_epoch: int) -> int:
    """Keras' epochs: a whole number above initial_epoch."""
    if float(epochs) != int(epochs) or int(epochs) < 1:
        raise UserError(f"epochs={epochs}: Keras epochs are whole passes (run_classifier.py "
                        f"--num_train_epochs takes fractions)")
    if not 0 <= int(initial_epoch) < int(epochs):
        raise UserError(f"initial_epoch={initial_epoch}: expected 0 <= initial_epoch < "
                        f"epochs={epochs}")
    return int(epochs)


def sample_weights(values, count: int) -> np.ndarray:
    weights = np.asarray(values.numpy() if isinstance(values, tf.Tensor) else values,
                         np.float32).reshape(-1)
    if len(weights) != count:
        raise UserError(f"sample_weight: {len(weights)} weights for {count} texts")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise UserError("sample_weight: weights must be finite numbers >= 0")
    return weights


def is_empty(x) -> bool:
    if isinstance(x, tuple):
        return all(len(part) == 0 for part in x)
    return not isinstance(x, (str, bytes)) and x is not None and len(x) == 0


def checked_labels(labels, regression: bool) -> List[str]:
    if regression:
        if labels:
            raise UserError("regression=True takes no labels (one float output)")
        return []
    if labels is None or isinstance(labels, str) or len(labels) < 2:
        raise UserError(f"labels: need a list of two or more label names, got {labels!r}")
    names = [str(label) for label in labels]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UserError(f"labels: {', '.join(repeated)} given more than once")
    return names


def text_columns(x):
    """(texts, second texts or None) of `x`: texts or a pair of equally long lists, checked."""
    if isinstance(x, tuple) and len(x) == 2 and not isinstance(x[0], (str, bytes)):
        first, second = strings(x[0], "x[0]"), strings(x[1], "x[1]")
        if len(first) != len(second):
            raise UserError(f"x: a sentence pair needs as many second texts as first ones "
                            f"({len(first)} and {len(second)})")
        return first, second
    return strings(x, "x"), None


def strings(values, what: str) -> List[str]:
    if isinstance(values, (str, bytes)) or values is None:
        raise UserError(f"{what}: expected a sequence of texts, got {type(values).__name__}")
    values = values.numpy() if isinstance(values, tf.Tensor) else values
    texts = []
    for i, value in enumerate(values):
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not isinstance(value, str):
            raise UserError(f"{what}[{i}]: expected a text, got {type(value).__name__} "
                            f"{value!r}")
        texts.append(value)
    if not texts:
        raise UserError(f"{what}: no texts")
    return texts


def label_values(y, count: int, labels: Sequence[str]) -> list:
    """Label names (classification) or floats (regression) of `y`; None when no `y`."""
    if y is None:
        return [None] * count
    y = y.numpy() if isinstance(y, tf.Tensor) else y
    values = list(np.asarray(y).reshape(-1)) if isinstance(y, np.ndarray) else list(y)
    if len(values) != count:
        raise UserError(f"y: {len(values)} labels for {count} texts")
    if not labels:
        try:
            return [float(v) for v in values]
        except (TypeError, ValueError):
            raise UserError("y: regression targets must be numbers") from None
    known = set(labels)
    targets = []
    for i, value in enumerate(values):
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and \
                str(value) not in known:
            if not 0 <= value < len(labels):
                raise UserError(f"y[{i}]: label id {value} is not in 0..{len(labels) - 1}")
            value = labels[value]
        value = str(value)
        if value not in known:
            raise UserError(f"y[{i}]: {value!r} is not one of the labels "
                            f"({', '.join(labels)})")
        targets.append(value)
    return targets
