r"""BERT + adapters fine-tuning runner for GLUE, flag-compatible with Google's run_classifier.py.

Example (adapter-tune MRPC on the embedded MiniLM backbone):

    python -m adapter_bert.run_classifier --task_name=MRPC --do_train --do_eval \
        --data_dir=glue_data/MRPC --output_dir=/tmp/mrpc \
        --learning_rate=1e-3
"""

from adapter_bert import cli

PROGRAM, FLAGS, main, run = cli.entry_point(__name__, "run_classifier.py", "adapter-bert-classifier",
                                            "classifier")

if __name__ == "__main__":
    run()
