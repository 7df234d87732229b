"""bench/adapter_gradients.py: grouping of trained weights and the table it writes."""

from bench.adapter_gradients import EPSILON, GROUPS, group_of, markdown


def test_trained_weights_fall_into_their_groups(tiny_config):
    import adapter_bert as ab
    from adapter_bert.adapters.tuning import parameter_components
    from adapter_bert.training.optimizer import GOOGLE_EPSILON
    assert EPSILON == GOOGLE_EPSILON
    from adapter_bert.model.checkpoints import build_model
    model = ab.BertClassifier(tiny_config, 2, ab.AdapterConfig(size=4))
    build_model(model)
    ab.apply_tuning(model, "adapter", train_pooler=True)
    trained = {id(v) for v in model.trainable_variables}
    groups = {group_of(v, c) for v, c in parameter_components(model) if id(v) in trained}
    assert groups == set(GROUPS)
    by_name = {v.name: group_of(v, c) for v, c in parameter_components(model)}
    assert all(g == "adapter weights" for n, g in by_name.items() if "adapters/weights" in n)
    assert all(g == "adapter biases" for n, g in by_name.items() if "adapters/biases" in n)


def test_table_has_one_row_per_scale_with_median_and_share():
    stats = {g: {"median_abs_grad": 1.4e-7, "share_below_epsilon": 0.98} for g in GROUPS}
    table = markdown([{"init_scale": 1e-3, "stats": stats}])
    assert table.splitlines()[2] == "| 0.001 | " + " | ".join(["1.4e-07 (98%)"] * len(GROUPS)) + " |"
    assert f"epsilon = {EPSILON:g}" in table
