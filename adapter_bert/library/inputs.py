"""What `TextClassifier`'s Keras methods are given as lists or arrays, checked before
they become a dataset: texts (single or pairs), labels, weights, `validation_split`.
Each refusal is one line naming the argument and what was expected.
"""

from typing import List, Sequence

import numpy as np
import tensorflow as tf

from adapter_bert.errors import UserError


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


def sample_weights(values, count: int) -> np.ndarray:
    weights = np.asarray(values.numpy() if isinstance(values, tf.Tensor) else values,
                         np.float32).reshape(-1)
    if len(weights) != count:
        raise UserError(f"sample_weight: {len(weights)} weights for {count} texts")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise UserError("sample_weight: weights must be finite numbers >= 0")
    return weights


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


def is_pair(x) -> bool:
    """Whether texts given in memory are sentence pairs: only a pair `(first_texts,
    second_texts)` is (a list of two texts is two texts)."""
    return isinstance(x, tuple) and len(x) == 2 and not isinstance(x[0], (str, bytes))


def text_columns(x):
    """(texts, second texts or None) of `x`: texts or a pair of equally long lists, checked."""
    if is_pair(x):
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


def label_array(y, count: int, labels: Sequence[str]) -> np.ndarray:
    """`y` as the model trains on it: int32 label ids, or float32 targets for regression
    (`labels` empty). Strings are label names and integers are ids, also when the names
    are digits ("1".."5": the id of "1" is 0). One line for anything else: an unknown
    name, an id out of range, one-hot rows, floats for classes.
    """
    y = y.numpy() if isinstance(y, tf.Tensor) else y
    values = np.asarray(y if isinstance(y, np.ndarray) else list(y))
    if values.ndim == 2 and values.shape[1] > 1:
        raise UserError(f"y: {values.shape[1]} columns per row (one-hot?): pass a label id or "
                        f"name per text (for one-hot rows, y.argmax(-1))")
    values = values.reshape(-1)
    if len(values) != count:
        raise UserError(f"y: {len(values)} labels for {count} texts")
    if not labels:
        try:
            return values.astype(np.float32)
        except (TypeError, ValueError):
            raise UserError("y: regression targets must be numbers") from None
    if values.dtype.kind in "iu":
        bad = np.flatnonzero((values < 0) | (values >= len(labels)))
        if bad.size:
            raise UserError(f"y[{bad[0]}]: label id {values[bad[0]]} is not in "
                            f"0..{len(labels) - 1} (integers are ids; names are strings)")
        return values.astype(np.int32)
    index = {name: i for i, name in enumerate(labels)}
    ids = []
    for i, value in enumerate(values):
        name = value.item() if isinstance(value, np.generic) else value
        name = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
        if not isinstance(name, str) or name not in index:
            raise UserError(f"y[{i}]: {name!r} is not one of the labels ({', '.join(labels)}); "
                            f"expected a label name or an integer id")
        ids.append(index[name])
    return np.asarray(ids, np.int32)
