"""run_classifier.py end to end on a tiny backbone: outputs, adapter files, bad flags, resume."""

import signal

import numpy as np
import pytest

from tests.runner_utils import (flag_list, python_output, read_results, run_in_process, run_killable,
                                run_subprocess)


def common_flags(backbone, output_dir, **overrides):
    values = {"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": output_dir,
              "max_seq_length": 32, "train_batch_size": 16, "eval_batch_size": 64,
              "predict_batch_size": 64, "learning_rate": 1e-3, "adapter_size": 8,
              "save_checkpoints_steps": 2}
    return flag_list(values, overrides)


@pytest.fixture(scope="module")
def mrpc_run(backbone, mrpc_dir, tmp_path_factory):
    """One adapter-tuning run on written MRPC: 4 training steps, eval and predict."""
    out = tmp_path_factory.mktemp("mrpc")
    code, _ = run_in_process("run_classifier", [
        "--task_name=MRPC", "--do_train", "--do_eval", "--do_predict",
        f"--data_dir={mrpc_dir}", "--num_train_epochs=0.02",
        *common_flags(backbone, out)])
    assert code == 0
    return out


@pytest.mark.slow
def test_outputs_follow_the_original_formats(mrpc_run):
    results = read_results(mrpc_run / "eval_results.txt")
    assert list(results) == sorted(results)
    steps = int(3668 / 16 * 0.02)
    assert results["global_step"] == str(steps)
    for key in ("eval_accuracy", "eval_f1", "eval_loss", "loss", "trainable_params",
                "all_params", "trainable_percent"):
        assert key in results
    assert 0.0 <= float(results["eval_accuracy"]) <= 1.0
    # --train_pooler=auto: the tiny backbone's pooler has a zero bias, so it trains too.
    adapters, layer_norms, head, pooler = 4 * (2 * 16 * 8 + 8 + 16), 5 * 32, 2 * 16 + 2, 16 * 16 + 16
    assert results["trainable_params"] == str(adapters + layer_norms + head + pooler)
    rows = [line.split("\t") for line in (mrpc_run / "test_results.tsv").read_text().splitlines()]
    assert len(rows) == 1725 and all(len(r) == 2 for r in rows)
    np.testing.assert_allclose([sum(map(float, r)) for r in rows], 1.0, atol=1e-5)
    assert sorted(p.name for p in (mrpc_run / "checkpoints").glob("ckpt-*.index")) == \
        ["ckpt-2.index", "ckpt-4.index"]
    assert (mrpc_run / "logs" / "train").is_dir()  # TensorBoard
    cached = sorted(p.name.split("-")[1] for p in (mrpc_run / "feature_cache").glob("*.npz"))
    assert cached == ["dev", "test", "train"]


def test_adapter_file_is_small_and_reproduces_the_metrics(mrpc_run, backbone, mrpc_dir, tmp_path):
    adapter = mrpc_run / "adapter"
    weights = (adapter / "adapter_model.safetensors").stat().st_size
    backbone_bytes = (backbone / "bert_model.ckpt.data-00000-of-00001").stat().st_size
    assert weights < backbone_bytes / 10
    # The run evaluated with dynamic padding; padding every batch to max_seq_length (and
    # tokenising afresh) must give the same metrics.
    code, _ = run_in_process("run_classifier", [
        "--task_name=MRPC", "--do_eval", f"--data_dir={mrpc_dir}",
        f"--load_adapter={adapter}", "--padding=max_seq_length", "--feature_cache_dir=none",
        *common_flags(backbone, tmp_path / "eval_only")])
    assert not (tmp_path / "eval_only" / "feature_cache").exists()
    assert code == 0
    original = read_results(mrpc_run / "eval_results.txt")
    again = read_results(tmp_path / "eval_only" / "eval_results.txt")
    for key in ("eval_accuracy", "eval_f1", "eval_loss"):
        assert float(again[key]) == pytest.approx(float(original[key]), abs=1e-6), key


# XLA draws other dropout masks than plain TensorFlow, and the 16-bit types round: all
# land near, not on, the float32 run's loss after the same 4 steps. float16 trains with
# Keras' dynamic loss scaling (compile wraps the optimizer under that policy).
@pytest.mark.slow
@pytest.mark.parametrize("flag,tolerance", [("--jit_compile=true", 0.01),
                                             ("--dtype=mixed_bfloat16", 0.03),
                                             ("--dtype=mixed_float16", 0.01)])
def test_xla_and_bfloat16_train_to_the_float32_result(mrpc_run, backbone, mrpc_dir, tmp_path,
                                                    flag, tolerance):
    # A subprocess: the dtype policy is process-global.
    done = run_subprocess("run_classifier.py", [
        "--task_name=MRPC", "--do_train", "--do_eval", f"--data_dir={mrpc_dir}",
        "--num_train_epochs=0.02", flag, *common_flags(backbone, tmp_path / "out")])
    assert done.returncode == 0, done.stderr[-2000:]
    reference = read_results(mrpc_run / "eval_results.txt")
    results = read_results(tmp_path / "out" / "eval_results.txt")
    assert results["global_step"] == reference["global_step"]
    assert float(results["eval_loss"]) == pytest.approx(float(reference["eval_loss"]),
                                                        abs=tolerance)


def test_train_pooler_false_freezes_it_as_the_original(backbone, mrpc_dir, tmp_path):
    code, _ = run_in_process("run_classifier", [
        "--task_name=MRPC", "--do_eval", f"--data_dir={mrpc_dir}",
        "--train_pooler=false", *common_flags(backbone, tmp_path / "out")])
    assert code == 0
    results = read_results(tmp_path / "out" / "eval_results.txt")
    assert results["trainable_params"] == str(4 * (2 * 16 * 8 + 8 + 16) + 5 * 32 + 2 * 16 + 2)


def test_eval_only_restores_the_output_dir_checkpoint(mrpc_run, backbone, mrpc_dir, tmp_path):
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(mrpc_run / "checkpoints", copy / "checkpoints")
    code, _ = run_in_process("run_classifier", [
        "--task_name=MRPC", "--do_eval", f"--data_dir={mrpc_dir}",
        *common_flags(backbone, copy)])
    assert code == 0
    original = read_results(mrpc_run / "eval_results.txt")
    again = read_results(copy / "eval_results.txt")
    assert again["global_step"] == original["global_step"]
    assert float(again["eval_loss"]) == pytest.approx(float(original["eval_loss"]), abs=1e-6)


def write_tsv(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ([header] if header else []) + rows
    path.write_text("".join("\t".join(map(str, r)) + "\n" for r in lines), encoding="utf-8")


@pytest.mark.slow
def test_stsb_regression_trains_and_predicts_one_score(backbone, tmp_path):
    data = tmp_path / "STS-B"
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"]
    rows = [[i, "main-news", "f", "2012", i, "none", "none", f"a man plays {w}", f"a man {w}s",
             f"{(i % 6):.3f}"] for i, w in enumerate(["guitar", "piano", "ball", "drum"] * 8)]
    write_tsv(data / "train.tsv", header, rows)
    write_tsv(data / "dev.tsv", header, rows[:12])
    write_tsv(data / "test.tsv", header[:-1], [r[:-1] for r in rows[:5]])
    code, _ = run_in_process("run_classifier", [
        "--task_name=STS-B", "--do_train", "--do_eval", "--do_predict", f"--data_dir={data}",
        "--num_train_epochs=1", *common_flags(backbone, tmp_path / "out")])
    assert code == 0
    results = read_results(tmp_path / "out" / "eval_results.txt")
    assert {"eval_pearson", "eval_spearmanr", "eval_corr"} <= set(results)
    assert "eval_accuracy" not in results
    scores = (tmp_path / "out" / "test_results.tsv").read_text().splitlines()
    assert len(scores) == 5 and all(len(s.split("\t")) == 1 for s in scores)


@pytest.mark.slow
def test_mnli_evaluates_matched_and_mismatched(backbone, tmp_path):
    data = tmp_path / "MNLI"
    header = ["index", "promptID", "pairID", "genre", "s1bp", "s2bp", "s1p", "s2p", "sentence1",
              "sentence2", "label1", "gold_label"]
    labels = ["contradiction", "entailment", "neutral"]
    rows = [[i, i, i, "g", "x", "x", "x", "x", f"the cat sat {i}", f"a cat {i}", labels[i % 3],
             labels[i % 3]] for i in range(12)]
    write_tsv(data / "train.tsv", header, rows)
    dev_header = header[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]
    dev_rows = [r[:-1] + [r[-1]] * 4 + [r[-1]] for r in rows]
    write_tsv(data / "dev_matched.tsv", dev_header, dev_rows)
    write_tsv(data / "dev_mismatched.tsv", dev_header, dev_rows[:6])
    code, _ = run_in_process("run_classifier", [
        "--task_name=MNLI", "--do_train", "--do_eval", f"--data_dir={data}",
        "--num_train_epochs=2", *common_flags(backbone, tmp_path / "out")])
    assert code == 0
    results = read_results(tmp_path / "out" / "eval_results.txt")
    assert {"eval_accuracy", "eval_mismatched_accuracy", "eval_mismatched_loss"} <= set(results)


@pytest.mark.parametrize("extra, message", [
    (["--task_name=MRPX"], "--task_name: .*MRPX"),
    (["--task_name=MRPC", "--max_seq_length=128"],
     "Cannot use sequence length 128 because the BERT model was only trained up to sequence length 64"),
    (["--task_name=MRPC", "--data_dir=/nonexistent"], "--data_dir=/nonexistent: directory not found"),
    (["--task_name=MRPC", "--tuning_mode=top_k"], "--tuning_mode=top_k needs --top_k_layers"),
    (["--task_name=AX", "--do_eval"], "AX is a diagnostic set"),
])
def test_bad_flags_give_one_clear_line(backbone, mrpc_dir, tmp_path, capsys, extra, message):
    argv = [f"--data_dir={mrpc_dir}", "--do_train",
            *common_flags(backbone, tmp_path / "out")]
    argv = [a for a in argv if a.split("=")[0] not in {e.split("=")[0] for e in extra}] + extra
    code, _ = run_in_process("run_classifier", argv)
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("run_classifier.py: error: ")
    assert __import__("re").search(message, err[-1]), err[-1]


def test_no_action_flag_and_output_dir_file(backbone, mrpc_dir, tmp_path, capsys):
    base = [f"--data_dir={mrpc_dir}", "--task_name=MRPC"]
    code, _ = run_in_process("run_classifier", base + common_flags(backbone, tmp_path / "o"))
    assert code == 1 and "At least one of `do_train`, `do_eval` or `do_predict`" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _ = run_in_process("run_classifier", base + ["--do_eval"] + common_flags(backbone, blocker))
    assert code == 1 and "exists and is a file" in capsys.readouterr().err


def test_do_lower_case_must_match_a_cased_checkpoint(backbone, mrpc_dir, tmp_path, capsys):
    import shutil
    cased = tmp_path / "cased_L-2_H-16_A-2"
    shutil.copytree(backbone, cased)
    code, _ = run_in_process("run_classifier", [
        "--task_name=MRPC", "--do_eval", f"--data_dir={mrpc_dir}",
        *common_flags(cased, tmp_path / "out")])
    assert code == 1
    assert "--do_lower_case=True but" in capsys.readouterr().err


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(backbone, mrpc_dir, tmp_path):
    argv = ["--task_name=MRPC", "--do_train", f"--data_dir={mrpc_dir}",
            "--num_train_epochs=0.1", *common_flags(backbone, tmp_path / "out")]
    total = int(3668 / 16 * 0.1)
    # Killed just before checkpoint 8 is written: steps 7 and 8 are lost.
    killed = run_killable("run_classifier.py", argv, KILL_BEFORE_CHECKPOINT=8)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    checkpoints = tmp_path / "out" / "checkpoints"
    saved = sorted(int(p.name.split("-")[1].split(".")[0]) for p in checkpoints.glob("ckpt-*.index"))
    assert saved == [2, 4, 6]
    rerun = run_subprocess("run_classifier.py", argv)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "ckpt-6" in rerun.stderr and "Restored" in rerun.stderr
    assert f"steps 7..{total} of {total}" in rerun.stderr
    assert (tmp_path / "out" / f"checkpoints/ckpt-{total}.index").exists()
    # TensorBoard's curve goes on from step 7: the loss is logged at global steps 10 and
    # 20 (every 10 steps), not at the resumed call's own 10th step.
    assert _logged_steps(tmp_path / "out" / "logs" / "train", "batch_loss") == [10, 20]


def _logged_steps(log_dir, tag):
    import tensorflow as tf
    from tensorflow.core.util import event_pb2
    steps = []
    for path in sorted(log_dir.glob("events*")):
        for raw in tf.data.TFRecordDataset(str(path)):
            event = event_pb2.Event.FromString(raw.numpy())
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return sorted(steps)


@pytest.mark.slow
def test_default_dtype_is_this_machines_native_one_and_logged(backbone, mrpc_dir, tmp_path):
    # The suite pins --dtype=auto to float32 (tests/conftest.py); an empty value lifts it.
    from adapter_bert.precision import choose_dtype, describe_hardware
    argv = ["--task_name=MRPC", "--do_train", f"--data_dir={mrpc_dir}",
            "--num_train_epochs=0.01", *common_flags(backbone, tmp_path / "out")]
    done = run_subprocess("-m adapter_bert.run_classifier", argv,
                          env={"ADAPTER_BERT_DTYPE": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    expected, why = choose_dtype(describe_hardware())
    assert f"dtype: {expected} (--dtype=auto: {why})" in done.stderr


def test_mixed_float16_trains_with_dynamic_loss_scaling():
    # A subprocess: the dtype policy is process-global. Keras wraps the optimizer only if
    # the model itself took the policy, which is what this checks.
    probe = ("from adapter_bert.precision import set_dtype_policy\n"
             "set_dtype_policy('mixed_float16')\n"
             "import tf_keras as keras\n"
             "from adapter_bert.model.config import BertConfig\n"
             "from adapter_bert.model.heads import BertClassifierNetwork\n"
             "config = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2,\n"
             "                    num_attention_heads=2, intermediate_size=32)\n"
             "model = BertClassifierNetwork(config, 2)\n"
             "model.compile(optimizer=keras.optimizers.Adam(1e-3), loss='mse')\n"
             "print(model.dtype_policy.name, model.optimizer.dynamic)")
    assert python_output(probe).split()[-2:] == ["mixed_float16", "True"]


@pytest.mark.slow
def test_xnli_trains_and_evaluates_on_the_original_layout(backbone, tmp_path):
    """--task_name=XNLI reads multinli/multinli.train.zh.tsv and the zh rows of
    xnli.dev.tsv, as Google's run_classifier.py, and reports accuracy."""
    data = tmp_path / "XNLI"
    (data / "multinli").mkdir(parents=True)
    labels = ["entailment", "neutral", "contradictory"]
    train = ["premise\thypo\tlabel"] + [
        f"第 {i} 个 句子 。\t句子 {i % 5} 。\t{labels[i % 3]}" for i in range(48)]
    (data / "multinli" / "multinli.train.zh.tsv").write_text("\n".join(train) + "\n",
                                                              encoding="utf-8")
    dev = ["language\tgold_label\t" + "\t".join(f"c{j}" for j in range(2, 15))]
    for i in range(12):
        language = "zh" if i % 4 else "en"
        label = ["entailment", "neutral", "contradiction"][i % 3]
        cells = [language, label, "", "", "", "", f"第 {i} 句 。", f"句子 {i} 。"] + [""] * 7
        dev.append("\t".join(cells))
    (data / "xnli.dev.tsv").write_text("\n".join(dev) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code, _ = run_in_process("run_classifier", [
        "--task_name=XNLI", "--do_train", "--do_eval", f"--data_dir={data}",
        "--num_train_epochs=1", *common_flags(backbone, out)])
    assert code == 0
    results = read_results(out / "eval_results.txt")
    assert results["global_step"] == str(48 // 16)
    # 9 of the 12 dev rows are Chinese: accuracy is a multiple of 1/9
    accuracy = float(results["eval_accuracy"])
    assert 0.0 <= accuracy <= 1.0 and abs(accuracy * 9 - round(accuracy * 9)) < 1e-5
    assert "eval_f1" not in results


@pytest.mark.parametrize("regression", (False, True))
def test_eval_loss_is_the_training_loss(regression):
    """eval_loss (numpy, `mean_loss`) is the Keras training loss (`ClassifierRun._loss`)."""
    import tf_keras as keras

    from adapter_bert.metrics.classification import mean_loss
    from adapter_bert.runners.classifier import ClassifierRun

    rng = np.random.default_rng(0)
    logits = (3 * rng.normal(size=(257, 1 if regression else 3))).astype(np.float32)
    labels = (rng.normal(size=(257, 1)).astype(np.float32) if regression
              else rng.integers(0, 3, 257).astype(np.int32))
    run = ClassifierRun.__new__(ClassifierRun)  # _loss reads these two only
    run.is_regression, run.class_weights = regression, None
    expected = float(run._loss()(labels, logits).numpy())
    assert isinstance(run._loss(), keras.losses.Loss)
    assert mean_loss(logits, labels, regression) == pytest.approx(expected, rel=1e-6)
