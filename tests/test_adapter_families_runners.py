"""The runners with adapter families: family flags checked before anything runs, LoRA
targets trained and exported merged, and a family a launcher script registers."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.adapters.files import adapter_config_of
from tests.conftest import REPO
from tests.runner_utils import run_in_process


def mrpc_flags(backbone, mrpc_dir, output_dir, *extra):
    return [f"--init_checkpoint={backbone / 'bert_model.ckpt'}", "--max_seq_length=32",
            "--train_batch_size=16", "--eval_batch_size=128", "--learning_rate=1e-3",
            "--adapter_size=4", "--train_pooler=false", "--save_checkpoints_steps=100",
            f"--data_dir={mrpc_dir}", "--task_name=MRPC", f"--output_dir={output_dir}", *extra]


@pytest.mark.parametrize("extra, message", [
    (["--lora_dropout=0.1"], "--lora_dropout only apply with --adapter_type=lora "
                             "(got --adapter_type=houlsby)"),
    (["--adapter_type=lora", "--lora_targets=query,ffn"], "--lora_targets: lora_targets must name"),
    (["--adapter_type=lora", "--merge_lora"], "--merge_lora merges LoRA into the exported model"),
    (["--merge_lora", "--export_dir=EXPORT"], "--adapter_type=houlsby has none to fold"),
])
def test_family_flags_are_checked_before_anything_runs(backbone, mrpc_dir, tmp_path, capsys,
                                                       extra, message):
    extra = [flag.replace("EXPORT", str(tmp_path / "export")) for flag in extra]
    code, _ = run_in_process("run_classifier", [
        "--do_eval", *mrpc_flags(backbone, mrpc_dir, tmp_path / "out", *extra)])
    assert code == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_run_classifier_trains_lora_targets_and_exports_it_merged(backbone, mrpc_dir, tmp_path):
    """--lora_targets/--lora_dropout train; --merge_lora exports kernels with LoRA folded
    in, serving the outputs of the unmerged export of the same adapter."""
    pytest.importorskip("tensorflow_text", reason="the [serving] extra is not installed")
    out = tmp_path / "out"
    code, _ = run_in_process("run_classifier", [
        "--do_train", "--num_train_epochs=0.02", "--adapter_type=lora", "--lora_alpha=8",
        "--lora_targets=value,query,intermediate", "--lora_dropout=0.1", "--merge_lora",
        f"--export_dir={tmp_path / 'merged'}", *mrpc_flags(backbone, mrpc_dir, out)])
    assert code == 0
    config = adapter_config_of(str(out / "adapter"))
    assert (config.lora_targets, config.lora_dropout, config.lora_alpha) == (
        ("query", "value", "intermediate"), 0.1, 8.0)
    code, _ = run_in_process("run_classifier", [
        f"--load_adapter={out / 'adapter'}", f"--export_dir={tmp_path / 'unmerged'}",
        *mrpc_flags(backbone, mrpc_dir, tmp_path / "out2")])
    assert code == 0
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops of the exports)
    features = {"input_ids": tf.constant([[101, 2023, 2003, 102, 0], [101, 7592, 102, 0, 0]]),
                "input_mask": tf.constant([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]),
                "segment_ids": tf.zeros([2, 5], tf.int32)}
    served, kernels = {}, {}
    for kind in ("merged", "unmerged"):
        loaded = tf.saved_model.load(str(tmp_path / kind))
        served[kind] = loaded.signatures["from_features"](**features)["probabilities"].numpy()
        # The export holds the model's variables as a list, in the model's order.
        reader = tf.train.load_checkpoint(str(tmp_path / kind / "variables" / "variables"))
        kernels[kind] = {name: reader.get_tensor(name)
                         for name in reader.get_variable_to_shape_map()
                         if name.startswith("model_variables/")}
    np.testing.assert_allclose(served["merged"], served["unmerged"], rtol=1e-5, atol=1e-6)
    assert kernels["merged"].keys() == kernels["unmerged"].keys()
    differing = [value.shape for name, value in kernels["merged"].items()
                 if not np.array_equal(value, kernels["unmerged"][name])]
    # Each layer's query, value and intermediate kernels hold their LoRA update; every
    # other variable (LoRA's own included) is the same in both.
    assert sorted(differing) == sorted([(16, 16), (16, 16), (16, 32)] * 2)


@pytest.mark.slow
def test_the_runner_trains_a_family_registered_by_a_launcher(backbone, mrpc_dir, tmp_path):
    """A launcher script registers a family (with an absl flag for its option) before
    importing run_classifier: --adapter_type offers it, and the run trains and saves it."""
    (tmp_path / "my_family.py").write_text(textwrap.dedent('''
        import adapter_bert as ab


        class ScaledAdapter(ab.HoulsbyAdapter):
            def __init__(self, size=64, activation="gelu", init_scale=1e-2, scaled_by=1.0,
                         **kwargs):
                super().__init__(size, activation, init_scale, **kwargs)
                self.scaled_by = float(scaled_by)

            def call(self, inputs, residual=None, layer_norm=None):
                return inputs + self.scaled_by * self.bottleneck(inputs)

            def get_config(self):
                return dict(super().get_config(), scaled_by=self.scaled_by)


        ab.register_adapter_family(ab.AdapterFamily(
            name="scaled", layer=ScaledAdapter, default_positions="ffn",
            options={"scaled_by": ab.AdapterOption(1.0, float)},
            param_count=lambda config, d_in, d_out: 2 * d_in * config.size + config.size + d_in,
            description="a scaled bottleneck"))
        '''))
    (tmp_path / "launcher.py").write_text(textwrap.dedent('''
        import sys

        import my_family  # noqa: F401  (registers "scaled" before the flags are defined)
        from absl import flags

        flags.DEFINE_float("scaled_by", 1.0, "The scaled family's factor.")
        from adapter_bert import run_classifier

        print("choices:", ",".join(flags.FLAGS["adapter_type"].parser.enum_values), flush=True)
        run_classifier.run()
        '''))
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}:{REPO}", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, str(tmp_path / "launcher.py"), "--do_train",
                           "--num_train_epochs=0.01", "--adapter_type=scaled", "--scaled_by=0.5",
                           *mrpc_flags(backbone, mrpc_dir, out)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "choices: houlsby,pfeiffer,parallel,lora,scaled,resadapter" in done.stdout
    stored = json.loads((out / "adapter" / "adapter_config.json").read_text())["adapter_config"]
    assert (stored["adapter_type"], stored["scaled_by"], stored["positions"]) == (
        "scaled", 0.5, "ffn")
    assert any("/output/adapters/weights1" in name
               for name in json.loads((out / "adapter" / "adapter_config.json").read_text())[
                   "weights"])
