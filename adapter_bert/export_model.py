"""Export trained adapters as one SavedModel: one frozen backbone, a task name per row.

Example (two adapters trained by run_classifier.py on the embedded MiniLM):

    python -m adapter_bert.export_model --adapters=out/mrpc/adapter,out/sst2/adapter \
        --export_dir=serving/glue

The SavedModel takes `task`, `text_a` and `text_b` strings [batch] and answers each row
with its task's adapters and head (see docs/serving.md). Serving it needs TensorFlow
and `import tensorflow_text`, not this package.
"""

from adapter_bert import cli

PROGRAM, FLAGS, main, run = cli.entry_point(__name__, "export_model.py", "adapter-bert-export",
                                            "export")

if __name__ == "__main__":
    run()
