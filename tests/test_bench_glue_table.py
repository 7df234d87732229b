"""bench/glue_table.py: the runs of the paper's GLUE table, their order, and the table."""

from tests.conftest import bench_module

glue_table = bench_module("glue_table")
robust_defaults = bench_module("robust_defaults")
robust_suites = bench_module("robust_suites")


def test_runs_cover_every_row_once_with_the_cheap_cells_first():
    specs = glue_table.specs()
    ids = [robust_suites.run_id(s) for s in specs]
    # 3-epoch rows, 20 epochs, 3e-3 and 3e-4, CoLA's extra seeds, 3e-4 x 20 epochs (the
    # selection grid's last cell), bias-corrected AdamW on every task (CoLA: six seeds) and
    # for 20 epochs on the small tasks
    assert len(ids) == len(set(ids)) == \
        4 * 2 * 3 + 3 * 3 + 2 * 3 * 3 + 2 * 3 + 3 * 3 + 3 * 3 + 6 + 3 * 3
    assert glue_table.seeds_of("cola", "full", "5e-5", 3) == (42, 43, 44, 45, 46, 47)
    assert glue_table.seeds_of("cola", "adapter", "1e-3", 20) == (42, 43, 44)
    assert glue_table.seeds_of("mrpc", "adapter", "1e-3", 3) == (42, 43, 44)
    # Seed 42 of every small-task 3-epoch cell comes first, SST-2's other seeds last.
    assert [(s["task"], s["mode"], s["seed"]) for s in specs[:6]] == [
        (task, mode, 42) for task in ("cola", "mrpc", "rte") for mode in ("adapter", "full")]
    # The bias-corrected rows run last (the 3-epoch CoLA seeds 42-44 first, with the CoLA
    # cells), their 20-epoch runs at the very end, RTE's (the cheapest) first.
    corrected = [s for s in specs if s.get("optimizer") == "corrected"]
    assert specs[-21:] == corrected[3:]
    assert [s["epochs"] for s in specs[-9:]] == [20] * 9
    assert [s["task"] for s in specs[-9::3]] == ["rte", "mrpc", "cola"]
    assert glue_table.seeds_of("cola", "adapter", "1e-3", 3) == (42, 43, 44, 45, 46, 47)
    rest = specs[:-21]
    assert {s["task"] for s in rest[-4:]} == {"sst-2"} and 42 not in {s["seed"] for s in rest[-4:]}
    assert {(s["lr"], s["epochs"]) for s in rest[-13:-4]} == {("3e-4", 20)}
    # The MRPC and RTE cells are the stability suite's runs: recorded once, reused.
    stability = {robust_suites.run_id(s) for s in robust_suites.suite_specs("stability")}
    assert "rte_minilm_adapter_1e-3_3ep_seed43" in stability & set(ids)
    # Long runs keep checkpoints to resume from; the others are the user's plain command.
    for spec in specs:
        long_run = spec["task"] == "sst-2" or spec["epochs"] == 20
        assert ("save_checkpoints_steps" in spec) == long_run


def test_commands_are_the_runner_at_its_defaults(tmp_path):
    cola = glue_table.spec("cola", "adapter", "1e-3", 20, 43)
    command = robust_defaults.command_for(cola, str(tmp_path / "out"), str(tmp_path))
    assert command[:2] == ["-m", "adapter_bert.run_classifier"]
    assert "--task_name=CoLA" in command and "--num_train_epochs=20" in command
    assert "--learning_rate=1e-3" in command and "--seed=43" in command
    assert not [a for a in command if a.startswith(("--adam", "--warmup", "--adapter_init"))]
    corrected = glue_table.spec("cola", "adapter", "1e-3", 3, 42, "corrected")
    assert robust_suites.run_id(corrected) == "cola_minilm_adapter_1e-3_3ep_corrected_seed42"
    command = robust_defaults.command_for(corrected, str(tmp_path / "out"), str(tmp_path))
    assert [a for a in command if a.startswith("--adam")] == ["--adam_bias_correction"]


def _record(task, mode, lr, epochs, seed, **metrics):
    spec = glue_table.spec(task, mode, lr, epochs, seed)
    return robust_suites.run_id(spec), {
        **spec, "run": robust_suites.run_id(spec), "command": f"python run {task} {seed}",
        "wall_s": 60.0, "trainable_percent": 3.2339 if mode == "adapter" else 100.0,
        "dev_accuracy": None, **metrics}


def test_table_has_each_tasks_metric_mean_sd_and_the_average_once_complete():
    records = dict([
        _record("cola", "adapter", "1e-3", 3, 42, dev_mcc=20.0),  # CoLA: no accuracy
        _record("cola", "adapter", "1e-3", 3, 43, dev_mcc=24.0),
        _record("sst-2", "adapter", "1e-3", 3, 42, dev_accuracy=90.0),
        _record("mrpc", "adapter", "1e-3", 3, 42, dev_accuracy=80.0, dev_f1=86.0),
        _record("rte", "adapter", "1e-3", 3, 42, dev_accuracy=60.0),
        _record("rte", "full", "5e-5", 3, 42, dev_accuracy=55.0),
    ])
    rows, lines = glue_table.table(records)
    assert lines[0].startswith("| row | CoLA MCC | SST-2 acc | MRPC F1 | MRPC acc | RTE acc")
    adapters = rows[0]
    assert adapters["tasks"]["cola"]["dev_mcc"]["values"] == [20.0, 24.0]
    assert abs(adapters["tasks"]["cola"]["dev_mcc"]["sd"] - 2.8284) < 1e-4
    # The average of each task's first metric: (22 + 90 + 86 + 60) / 4.
    assert adapters["average"] == (22.0 + 90.0 + 86.0 + 60.0) / 4
    # The small tasks' average: (22 + 86 + 60) / 3.
    assert adapters["small_task_average"] == (22.0 + 86.0 + 60.0) / 3
    assert "| 22.00 ± 2.83 (2) | 90.00 (1) | 86.00 (1) | 80.00 (1) | 60.00 (1) | 64.50 | 56.00 |" \
        in lines[2]
    # CoLA's cells at the defaults have six seeds: three of them done still shows the count.
    records.update([_record("cola", "adapter", "1e-3", 3, 44, dev_mcc=22.0)])
    assert "| 22.00 ± 2.00 (3) | 90.00 (1) |" in glue_table.table(records)[1][2]
    # Full fine-tuning has one task done: no average yet.
    assert rows[1]["average"] is None and lines[3].split("|")[-4].strip() == "—"
    assert rows[1]["small_task_average"] is None and lines[3].split("|")[-3].strip() == "—"
    # The 20-epoch protocol and the sweep cells have no SST-2 cell, the bias-corrected row
    # has every task, its 20-epoch row the small ones; the peers' rows follow.
    assert all("n/a" in lines[i] for i in (4, 5, 6, 7, 9))
    assert lines[8].startswith("| adapters, bias-corrected") and "n/a" not in lines[8]
    assert lines[9].startswith("| adapters, bias-corrected") and "20 epochs" in lines[9]
    assert lines[10].startswith("| adapters, selected on dev per seed")
    assert lines[11].startswith("| AdapterHub")


def test_the_selected_row_takes_each_seeds_best_grid_point():
    grid = [("3e-4", 3), ("3e-4", 20), ("1e-3", 3), ("1e-3", 20)]
    records = dict(_record("cola", "adapter", lr, epochs, seed,
                           dev_mcc=float(10 * k + seed - 42))
                   for k, (lr, epochs) in enumerate(grid) for seed in (42, 43, 44))
    records.update(_record("mrpc", "adapter", lr, epochs, 42, dev_f1=f1, dev_accuracy=70.0)
                   for (lr, epochs), f1 in zip(grid, (80.0, 88.0, 85.0, 88.0)))
    rows, lines = glue_table.table(records)
    selected = rows[-1]
    assert selected["tasks"]["cola"]["chosen"] == [
        {"seed": s, "lr": "1e-3", "epochs": 20} for s in (42, 43, 44)]
    assert selected["tasks"]["cola"]["dev_mcc"]["values"] == [30.0, 31.0, 32.0]
    # MRPC: a tie goes to the first point of the grid; seeds 43 and 44 never ran.
    assert selected["tasks"]["mrpc"]["chosen"] == [{"seed": 42, "lr": "3e-4", "epochs": 20}]
    assert "| 31.00 ± 1.00 | — | 88.00 (1) |" in lines[10]
    # SST-2 has one point, the defaults: its runs enter as they are, and the four-task
    # average follows once every task has a figure.
    records.update([_record("sst-2", "adapter", "1e-3", 3, 42, dev_accuracy=90.0)]
                   + [_record("rte", "adapter", lr, epochs, 42, dev_accuracy=60.0)
                      for lr, epochs in grid])
    rows, lines = glue_table.table(records)
    assert rows[-1]["tasks"]["sst-2"]["chosen"] == [{"seed": 42, "lr": "1e-3", "epochs": 3}]
    assert rows[-1]["average"] == (31.0 + 90.0 + 88.0 + 60.0) / 4
    assert "| 31.00 ± 1.00 | 90.00 (1) | 88.00 (1) |" in lines[10]


def _cola_run_folder(tmp_path, global_step):
    """What a finished CoLA run leaves for its record: eval_results.txt and run.log."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "eval_results.txt").write_text(
        f"eval_loss = 0.61\neval_mcc = 0.2383\nglobal_step = {global_step}\n"
        "trainable_params = 753794\ntrainable_percent = 3.2339\n")
    (out / "run.log").write_text("Optimizer: Google's AdamW\n")
    return out


def test_a_cola_record_has_mcc_and_no_accuracy(tmp_path):
    out = _cola_run_folder(tmp_path, 801)
    spec = glue_table.spec("cola", "adapter", "1e-3", 3, 42)
    record = robust_defaults.result_record(spec, ["python", "x"], str(out), 12.0)
    assert record["dev_accuracy"] is None and abs(record["dev_mcc"] - 23.83) < 1e-9


def test_a_record_keeps_the_dev_loss_and_the_training_loss_of_each_epoch(tmp_path):
    import tensorflow as tf
    out = _cola_run_folder(tmp_path, 60)
    writer = tf.summary.create_file_writer(str(out / "logs" / "train"))
    with writer.as_default():  # the runner logs the batch loss every 10 steps
        for step, loss in zip(range(10, 70, 10), (0.7, 0.6, 0.5, 0.4, 0.3, 0.1)):
            tf.summary.scalar("batch_loss", loss, step=step)
    writer.close()
    spec = glue_table.spec("cola", "adapter", "1e-3", 3, 42)
    record = robust_defaults.result_record(spec, ["python", "x"], str(out), 12.0)
    assert record["dev_loss"] == 0.61
    assert record["train_loss_per_epoch"] == [0.65, 0.45, 0.2]
