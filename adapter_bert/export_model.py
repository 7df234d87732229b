"""Export trained adapters as one SavedModel: one frozen backbone, a task name per row.

Example (two adapters trained by run_classifier.py on the embedded MiniLM):

    python -m adapter_bert.export_model --adapters=out/mrpc/adapter,out/sst2/adapter \
        --export_dir=serving/glue

The SavedModel takes `task`, `text_a` and `text_b` strings [batch] and answers each row
with its task's adapters and head (see docs/serving.md). Serving it needs TensorFlow
and `import tensorflow_text`, not this package.

Installed, `adapter-bert-export` runs the same; in a clone of the repository,
`python export_model.py` does.
"""

import sys

from absl import flags

from adapter_bert import cli

# Before any import of TensorFlow (cli.start checks the install).
PROGRAM = cli.start("export_model.py", "adapter-bert-export")

flags.DEFINE_list("adapters", None, "Adapter directories to export, comma-separated.")
flags.DEFINE_list("names", None, "Task names, one per adapter (default: the task each "
                                 "adapter file records).")
flags.DEFINE_string("export_dir", None, "Where to write the SavedModel.")
flags.DEFINE_string("init_checkpoint", None, "The backbone the adapters were trained on "
                                             "(default: the embedded MiniLM).")
flags.DEFINE_string("bert_config_file", None, "The backbone's config, if not beside it.")
flags.DEFINE_string("vocab_file", None, "The vocabulary, if not beside the backbone.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per row after WordPiece, special "
                                            "tokens included; longer inputs are truncated.")
flags.DEFINE_enum("dtype", "auto", ("auto", "float32", "mixed_bfloat16"),
                  "Compute dtype of the exported graph. auto (default): mixed_bfloat16 "
                  "where this machine multiplies bfloat16 natively, else float32 (as the "
                  "runners); pass float32 to export for machines without bfloat16 units.")
FLAGS = flags.FLAGS


def main(argv=None) -> int:
    """Exports the adapters the flags name; input errors become one `<program>: error:`
    line.
    """
    del argv  # everything comes from flags
    from adapter_bert.tasks import base

    def export():
        from adapter_bert.tasks.flag_checks import FlagError, check_numeric_flags
        from adapter_bert.serving.export import require_serving_extra
        from adapter_bert.serving.multi_adapter import export_multi_adapter
        from adapter_bert.precision import apply_dtype
        check_numeric_flags(FLAGS)
        if FLAGS.max_seq_length < 3:  # a pair task's [CLS] a [SEP] b [SEP] must fit
            raise FlagError(f"--max_seq_length must be at least 3, got {FLAGS.max_seq_length}")
        if not FLAGS.adapters:
            raise FlagError("--adapters is required (adapter directories, comma-separated)")
        if not FLAGS.export_dir:
            raise FlagError("--export_dir is required")
        require_serving_extra()
        apply_dtype(FLAGS.dtype)
        path = export_multi_adapter(FLAGS.adapters, FLAGS.export_dir, FLAGS.init_checkpoint,
                                    FLAGS.bert_config_file, FLAGS.vocab_file,
                                    FLAGS.do_lower_case, FLAGS.max_seq_length, FLAGS.names)
        print(f"exported: {path}", flush=True)
        return 0

    return base.run_cli(PROGRAM, export)


def run() -> None:
    """The command line: parses sys.argv with absl and exits with main's status."""
    cli.run(sys.modules[__name__], main)


if __name__ == "__main__":
    run()
