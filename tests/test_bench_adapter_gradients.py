"""bench/adapter_gradients.py: grouping of trained weights and the table it writes."""

from bench.adapter_gradients import EPSILON, GROUPS, group_of, markdown


def test_trained_weights_fall_into_their_groups():
    names = {
        "bert/encoder/layer_0/attention/output/adapters/weights1:0": "adapter weights",
        "bert/encoder/layer_0/output/adapters/biases2:0": "adapter biases",
        "bert/encoder/layer_3/output/LayerNorm/gamma:0": "layer_norms",
        "bert/pooler/dense/kernel:0": "pooler",
        "classifier/output_weights:0": "head",
        "classifier/output_bias:0": "head",
    }
    assert {name: group_of(name) for name in names} == names


def test_table_has_one_row_per_scale_with_median_and_share():
    stats = {g: {"median_abs_grad": 1.4e-7, "share_below_epsilon": 0.98} for g in GROUPS}
    table = markdown([{"init_scale": 1e-3, "stats": stats}])
    assert table.splitlines()[2] == "| 0.001 | " + " | ".join(["1.4e-07 (98%)"] * len(GROUPS)) + " |"
    assert f"epsilon = {EPSILON:g}" in table
