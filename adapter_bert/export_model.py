"""Export trained adapters as one SavedModel: one frozen backbone, a task name per row.

Example (two adapters trained by run_classifier.py on the embedded MiniLM):

    python -m adapter_bert.export_model --adapters=out/mrpc/adapter,out/sst2/adapter \
        --export_dir=serving/glue

The SavedModel takes `task`, `text_a` and `text_b` strings [batch] and answers each row
with its task's adapters and head (see docs/serving.md). Serving it needs TensorFlow
and `import tensorflow_text`, not this package.
"""

from adapter_bert import cli


def _job(flag_values) -> int:
    """The runner's work on the parsed flags; runners/ loads TensorFlow, so it is imported
    here, once `cli.start` has checked the install."""
    from adapter_bert.runners.export import main as work
    return work(flag_values)


PROGRAM, FLAGS, main, run = cli.entry_point(__name__, "export_model.py", "adapter-bert-export",
                                            "export", _job)

if __name__ == "__main__":
    run()
