"""Adapter ablation over contiguous layer spans (Houlsby et al., 2019, Fig. 6).

A trained model is re-evaluated with the adapters of layers `first..last` switched off
(`adapter_enabled`; LayerNorms, head and pooler keep their trained values), for every
span: an upper-triangular L x L matrix, rows the first ablated layer, columns the last.

    >>> layer_spans(3)
    [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
"""

import contextlib
import csv
import dataclasses
import io
import json
import math
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from adapter_bert import io_utils
from adapter_bert.metrics.classification import main_metric
from adapter_bert.errors import UserError
from adapter_bert.model.encoder import backbone_of, holders, reset_compiled_functions


def check_metric(metric, metrics_kind: str) -> None:
    """--ablation_metric names a figure the evaluation writes (`eval_<metric>` of the
    task's kind, or eval_loss); refused in one line before anything is loaded."""
    from adapter_bert.metrics.classification import METRIC_NAMES
    from adapter_bert.command_line.flag_checks import FlagError
    known = ["eval_loss"] + [f"eval_{name}" for name in METRIC_NAMES[metrics_kind]]
    if metric is not None and metric not in known:
        raise FlagError(f"--ablation_metric={metric}: the evaluation reports "
                        f"{', '.join(known)}")


def default_metric(metrics_kind: str) -> str:
    """The dev metric an ablation reports: the main metric of the task's kind of metrics
    (`metrics.classification.main_metric`), e.g. eval_mcc for CoLA."""
    return "eval_" + main_metric(metrics_kind)


def adapter_blocks_by_layer(model) -> List[list]:
    """Per transformer layer, the active adapter's `TaskBranch`es that hold an adapter (each
    with its `adapter_enabled` switch), in call order; empty for a layer without adapters.
    """
    layers = backbone_of(model).encoder.transformer_layers
    name = getattr(model, "active_adapter", None)
    if name is None:
        raise UserError("the model has no adapters to ablate (no active adapter)")
    branches = [[block.task_branches.get(name) for block in holders(layer)] for layer in layers]
    return [[branch for branch in found if branch is not None and branch.adapter is not None]
            for found in branches]


@contextlib.contextmanager
def adapters_disabled(model, layers: Iterable[int]) -> Iterator[None]:
    """Switches off the adapters of the given (0-based) transformer layers for the `with`
    body, restoring every switch on exit and resetting Keras' cached predict/test functions.
    ValueError for a layer outside the model.

        with adapters_disabled(classifier, range(2, 4)):
            logits = classifier.predict(dataset)
    """
    blocks_by_layer = adapter_blocks_by_layer(model)
    layers = sorted(set(int(i) for i in layers))
    bad = [i for i in layers if not 0 <= i < len(blocks_by_layer)]
    if bad:
        raise UserError(f"layers {bad} do not exist: the model has layers "
                        f"0..{len(blocks_by_layer) - 1}")
    blocks = [block for i in layers for block in blocks_by_layer[i]]
    saved = [block.adapter_enabled for block in blocks]
    reset_compiled_functions(model)
    try:
        for block in blocks:
            block.adapter_enabled = False
        yield
    finally:
        for block, enabled in zip(blocks, saved):
            block.adapter_enabled = enabled
        reset_compiled_functions(model)


def layer_spans(num_layers: int) -> List[Tuple[int, int]]:
    """Every contiguous span (first, last) of `num_layers` layers, first <= last.

    There are L (L + 1) / 2 of them, ordered by first layer then last layer.
    """
    if num_layers <= 0:
        raise UserError(f"num_layers must be positive, got {num_layers}")
    return [(first, last) for first in range(num_layers) for last in range(first, num_layers)]


@dataclasses.dataclass
class AblationResult:
    """Metrics of the unablated model and of every ablated span.

    Attributes:
        num_layers: transformer layers L.
        baseline: metrics with every adapter on.
        cells: (first, last) -> metrics with the adapters of layers first..last off.
    """

    num_layers: int
    baseline: Dict[str, float]
    cells: Dict[Tuple[int, int], Dict[str, float]]

    def metric_names(self) -> List[str]:
        """Numeric metrics present in the baseline, sorted."""
        return sorted(k for k, v in self.baseline.items() if _is_number(v))

    def matrix(self, metric: str) -> np.ndarray:
        """[L, L] array of `metric`: row = first ablated layer, column = last; NaN below
        the diagonal (empty spans) and for spans not evaluated."""
        out = np.full((self.num_layers, self.num_layers), np.nan)
        for (first, last), values in self.cells.items():
            out[first, last] = float(values[metric])
        return out

    def delta(self, metric: str) -> np.ndarray:
        """`matrix(metric)` minus the unablated value (negative = ablation hurts)."""
        return self.matrix(metric) - float(self.baseline[metric])

    def to_json(self) -> dict:
        """A JSON-ready dict (cells as a list of {first, last, metrics})."""
        return {"num_layers": self.num_layers, "baseline": _numbers(self.baseline),
                "cells": [{"first": first, "last": last, **_numbers(values)}
                          for (first, last), values in sorted(self.cells.items())]}

    @classmethod
    def from_json(cls, values: dict) -> "AblationResult":
        """Inverse of `to_json`."""
        cells = {}
        for cell in values["cells"]:
            cell = dict(cell)
            key = (int(cell.pop("first")), int(cell.pop("last")))
            cells[key] = cell
        return cls(int(values["num_layers"]), dict(values["baseline"]), cells)


def _is_number(value) -> bool:
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _numbers(values: Dict[str, object]) -> Dict[str, float]:
    return {k: float(v) for k, v in values.items() if _is_number(v)}


def run_ablation(model, evaluate: Callable[[], Dict[str, float]],
                 spans: Optional[Sequence[Tuple[int, int]]] = None,
                 progress: Optional[Callable[[Tuple[int, int], Dict[str, float]], None]] = None
                 ) -> AblationResult:
    """Evaluates the model unablated, then with each span's adapters switched off.

    `evaluate()` returns metrics and must run the model afresh; `spans` default to every
    `layer_spans(L)`; `progress(span, metrics)` is called after each. Returns the
    `AblationResult`; ValueError for a model without adapters or a span outside it.
    """
    blocks_by_layer = adapter_blocks_by_layer(model)
    num_layers = len(blocks_by_layer)
    if not any(blocks_by_layer):
        raise UserError("the model has no adapters to ablate in its output blocks (LoRA "
                        "adapters, which sit in self-attention, have no on/off switch)")
    spans = layer_spans(num_layers) if spans is None else [tuple(s) for s in spans]
    for first, last in spans:
        if not 0 <= first <= last < num_layers:
            raise UserError(f"span ({first}, {last}) is not 0 <= first <= last < {num_layers}")
    baseline = dict(evaluate())
    cells = {}
    for first, last in spans:
        with adapters_disabled(model, range(first, last + 1)):
            cells[(first, last)] = dict(evaluate())
        if progress is not None:
            progress((first, last), cells[(first, last)])
    return AblationResult(num_layers, baseline, cells)


def write_matrix_csv(result: AblationResult, path: str, metric: str) -> None:
    """Writes `metric` as an L x L CSV: a header row `first\\last,0,1,...`, then one row
    per first ablated layer; cells below the diagonal are empty."""
    matrix = result.matrix(metric)
    with _atomic_csv(path) as writer:
        writer.writerow([f"first\\last ({metric})"] + list(range(result.num_layers)))
        for first in range(result.num_layers):
            writer.writerow([first] + ["" if math.isnan(v) else f"{v:.6f}"
                                       for v in matrix[first]])


def write_cells_csv(result: AblationResult, path: str) -> None:
    """Writes one row per evaluation: first, last (empty for the unablated model), then
    every numeric metric."""
    names = result.metric_names()
    with _atomic_csv(path) as writer:
        writer.writerow(["first", "last", "layers_ablated"] + names)
        writer.writerow(["", "", 0] + [result.baseline[n] for n in names])
        for (first, last), values in sorted(result.cells.items()):
            writer.writerow([first, last, last - first + 1] + [values.get(n, "") for n in names])


@contextlib.contextmanager
def _atomic_csv(path: str):
    """A csv.writer whose rows are written to `path` (any filesystem) atomically on exit."""
    buffer = io.StringIO(newline="")
    yield csv.writer(buffer)
    io_utils.atomic_write_text(path, buffer.getvalue())


def plot_heatmap(result: AblationResult, path: str, metric: str,
                 title: Optional[str] = None, percent: bool = True) -> None:
    """Draws the span matrix as a heatmap PNG in the layout of the paper's Fig. 6: colour
    the change of `metric` from the unablated model (red = worse), cells annotated with the
    metric (x100 with `percent`), the diagonal outlined.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    scale = 100.0 if percent else 1.0
    values = result.matrix(metric) * scale
    delta = result.delta(metric) * scale
    size = result.num_layers
    limit = float(np.nanmax(np.abs(delta))) if np.any(~np.isnan(delta)) else 1.0
    limit = limit or 1.0
    fig, ax = plt.subplots(figsize=(1.0 + 0.85 * size, 0.6 + 0.8 * size))
    image = ax.imshow(np.ma.masked_invalid(delta), cmap="RdBu", vmin=-limit, vmax=limit)
    for first in range(size):
        for last in range(first, size):
            if not math.isnan(values[first, last]):
                dark = abs(delta[first, last]) > 0.6 * limit
                ax.text(last, first, f"{values[first, last]:.1f}" if percent
                        else f"{values[first, last]:.3f}", ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")
        ax.add_patch(Rectangle((first - 0.5, first - 0.5), 1, 1, fill=False, edgecolor="green",
                               linewidth=1.5))
    ax.set_xticks(range(size))
    ax.set_yticks(range(size))
    ax.set_xlabel("last layer with adapters removed")
    ax.set_ylabel("first layer with adapters removed")
    unit = " (points)" if percent else ""
    short = metric[5:] if metric.startswith("eval_") else metric
    fig.colorbar(image, ax=ax, label=f"change in {short}{unit}")
    base = float(result.baseline[metric]) * scale
    default_title = f"{metric}, all adapters on: " + (f"{base:.1f}" if percent else f"{base:.3f}")
    ax.set_title(title or default_title, fontsize=9)
    fig.tight_layout()
    image_bytes = io.BytesIO()
    fig.savefig(image_bytes, format="png", dpi=120)
    io_utils.atomic_write_bytes(path, image_bytes.getvalue())
    plt.close(fig)


def write_outputs(result: AblationResult, output_dir: str, metric: str,
                  title: Optional[str] = None, percent: bool = True) -> Dict[str, str]:
    """Writes `ablation_matrix.csv`, `ablation_results.csv`, `ablation.json` and
    `ablation_heatmap.png` to `output_dir`; returns {kind: path}. KeyError if `metric` was
    not evaluated.
    """
    if metric not in result.baseline:
        raise KeyError(f"metric {metric!r} was not evaluated; available: "
                       f"{', '.join(result.metric_names())}")
    io_utils.makedirs(output_dir)
    paths = {"matrix": io_utils.join(output_dir, "ablation_matrix.csv"),
             "cells": io_utils.join(output_dir, "ablation_results.csv"),
             "json": io_utils.join(output_dir, "ablation.json"),
             "heatmap": io_utils.join(output_dir, "ablation_heatmap.png")}
    write_matrix_csv(result, paths["matrix"], metric)
    write_cells_csv(result, paths["cells"])
    io_utils.atomic_write_text(paths["json"],
                               json.dumps({"metric": metric, **result.to_json()}, indent=2))
    plot_heatmap(result, paths["heatmap"], metric, title, percent)
    return paths


def summarize(result: AblationResult, metric: str) -> str:
    """A few lines for logs: unablated value, each single layer, all removed, worst span."""
    base = float(result.baseline[metric])
    lines = [f"{metric} with all adapters: {base:.4f}"]
    for layer in range(result.num_layers):
        if (layer, layer) in result.cells:
            value = float(result.cells[(layer, layer)][metric])
            lines.append(f"  layer {layer} removed: {value:.4f} ({value - base:+.4f})")
    full = (0, result.num_layers - 1)
    if full in result.cells:
        value = float(result.cells[full][metric])
        lines.append(f"  all layers removed: {value:.4f} ({value - base:+.4f})")
    if result.cells:
        worst = min(result.cells, key=lambda span: float(result.cells[span][metric]))
        value = float(result.cells[worst][metric])
        lines.append(f"  lowest: layers {worst[0]}..{worst[1]} removed: {value:.4f} "
                     f"({value - base:+.4f})")
    return "\n".join(lines)


# ------------------------------------------------------------------ command line
def classifier_main(flag_values) -> int:
    """ablate_adapters.py: the span ablation of a trained GLUE adapter model.

    Builds the model exactly as `run_classifier.py --do_eval` does (same flags, same
    `ClassifierRun`), loads the trained weights (`--load_adapter`, else the latest
    checkpoint in `--output_dir`), evaluates on dev with all adapters, then once per span
    of layers with that span's adapters switched off, and writes the matrix, heatmap and
    results into `--output_dir`.

    Raises:
        FlagError: a bad flag (`flag_checks.validate_ablation`), or no trained weights to ablate.
    """
    from adapter_bert.command_line.flag_checks import validate_ablation
    from adapter_bert.runners import base
    from adapter_bert.runners.classifier import ClassifierRun

    class AblationRun(ClassifierRun):
        check_flags = staticmethod(validate_ablation)
        quiet_evaluation = True  # one printed line per span (below), not a progress display

        def validate_flags(self, values) -> None:
            super().validate_flags(values)
            check_metric(values.ablation_metric, self.processor.metrics)

    # The ablation evaluates: its run reads the dev set whether or not --do_eval was given.
    return base.run_task(AblationRun, flag_values.replace(do_eval=True), None, _ablate)


def _ablate(run, flag_values) -> None:
    """The ablation of a built run: every span evaluated, the files written and named."""
    from absl import logging

    from adapter_bert.command_line.flag_checks import FlagError

    if not any(adapter_blocks_by_layer(run.model)):
        raise FlagError("the model has no adapters: pass --load_adapter with an adapter-tuned "
                        "run's adapter directory")
    step = run.restore_trained_weights()
    if not flag_values.load_adapter and step == 0:
        raise FlagError(f"no trained weights: no --load_adapter and no checkpoint in "
                        f"--output_dir={flag_values.output_dir}")
    metric = flag_values.ablation_metric or default_metric(run.processor.metrics)

    def progress(span, values):
        # Printed below; the log keeps the unrounded value at debug level.
        logging.debug("layers %d..%d removed: %s = %s", span[0], span[1], metric,
                      values.get(metric))
        print(f"layers {span[0]}..{span[1]} removed: {metric} = {values.get(metric):.4f}",
              flush=True)

    result = run_ablation(run.model, lambda: run.evaluate(step), progress=progress)
    percent = not metric.endswith(("loss", "pearson", "spearmanr", "corr"))
    paths = write_outputs(result, flag_values.output_dir, metric, flag_values.ablation_title,
                          percent=percent)
    print(summarize(result, metric), flush=True)
    for kind, path in paths.items():
        print(f"{kind}: {path}", flush=True)
