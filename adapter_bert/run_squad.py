r"""BERT + adapters for SQuAD v1.1 / v2.0, flag-compatible with Google's run_squad.py.

Example (adapter-tune SQuAD v1.1 on the embedded MiniLM backbone, then score dev):

    python -m adapter_bert.run_squad --do_train --do_predict \
        --train_file=squad/train-v1.1.json \
        --predict_file=squad/dev-v1.1.json \
        --max_seq_length=256 --doc_stride=128 --learning_rate=1e-3 \
        --output_dir=/tmp/squad

For SQuAD 2.0 add --version_2_with_negative; null_odds.json is written beside
predictions.json and the best no-answer threshold is reported.
"""

from adapter_bert import cli

PROGRAM, FLAGS, main, run = cli.entry_point(__name__, "run_squad.py", "adapter-bert-squad",
                                            "squad")

if __name__ == "__main__":
    run()
