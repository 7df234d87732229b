r"""Adapter ablation (Houlsby et al., 2019, Fig. 6): remove the adapters of every span of
layers i..j from a trained GLUE adapter model and re-evaluate on dev.

Takes run_classifier.py's flags (task, data, backbone, sequence length, batch sizes, ...)
plus --ablation_metric, and writes into --output_dir: ablation_matrix.csv,
ablation_results.csv, ablation.json and ablation_heatmap.png.

Example (after `run_classifier.py --task_name=MRPC --do_train ... --output_dir=/tmp/mrpc`):

    python -m adapter_bert.ablate_adapters --task_name=MRPC --data_dir=glue_data/MRPC \
        --load_adapter=/tmp/mrpc/adapter --output_dir=/tmp/mrpc_ablation \
        --eval_batch_size=64
"""

from adapter_bert import cli

PROGRAM, FLAGS, main, run = cli.entry_point(__name__, "ablate_adapters.py", "adapter-bert-ablate",
                                            "ablation")

if __name__ == "__main__":
    run()
