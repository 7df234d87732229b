"""Resume after a kill at any point: between checkpoints, during evaluation, during prediction.

With `--deterministic`, a run that is killed (a real SIGKILL from `tests/killer.py`) and
started again with the same command ends with the same bytes as an uninterrupted run:
adapter weights, eval_results.txt, test_results.tsv, predictions.json. Dropout is on
(rate 0.1 everywhere), so this holds only if the checkpoint restores every random-number
stream the steps after it draw from, not only the weights and the optimizer.
"""

import json
import signal
from pathlib import Path

import pytest

from tests.robustness.helpers import classifier_flags, squad_flags, write_mrpc_dir
from tests.runner_utils import run_killable, run_subprocess

DETERMINISTIC = ["--deterministic", "--seed=7"]


def run_to_completion(script: str, argv, kills):
    """Runs `script` once per kill in `kills` (each must die by SIGKILL), then to the end."""
    for hooks in kills:
        killed = run_killable(script, argv, **hooks)
        assert killed.returncode == -signal.SIGKILL, (hooks, killed.stderr[-3000:])
    finished = run_subprocess(script, argv)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return finished


def read_bytes(directory: Path, names):
    return {name: (directory / name).read_bytes() for name in names}


# --------------------------------------------------------------------------- mechanism

def test_the_checkpoint_tracks_every_dropout_generator(tiny_config, tmp_path):
    """Dropout layers that draw only in training (the attention-probability dropout) have
    no generator until a training step is traced; the checkpoint must hold them anyway."""
    import tf_keras as keras

    from adapter_bert.model.checkpoints import build_model
    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.model.fast_layers import Dropout
    from adapter_bert.adapters.task_models import ModelRecipe
    from adapter_bert.training.loop import TrainingCheckpoints, set_seed

    set_seed(3)
    model = ModelRecipe("classifier", 2, AdapterConfig(size=4)).new_model(tiny_config)
    build_model(model)
    dropouts = [layer for layer in model.submodules if isinstance(layer, Dropout)]
    # embeddings + 3 per layer (attention probabilities, attention output, output) + head
    assert len(dropouts) == 1 + 3 * tiny_config.num_hidden_layers + 1
    checkpoints = TrainingCheckpoints(model, keras.optimizers.Adam(), str(tmp_path))
    tracked = {id(v) for v in checkpoints.checkpoint._trackable_children().values()}
    generators = [getattr(layer._random_generator, "_generator", None) for layer in dropouts]
    untracked = [layer.name for layer, g in zip(dropouts, generators) if id(g) not in tracked]
    assert not untracked, f"dropout streams a resumed run would start over: {untracked}"
    assert len({id(g) for g in generators}) == len(generators)   # one stream per layer


# -------------------------------------------------------------------------- classifier

CLASSIFIER_OUTPUTS = ("adapter/adapter_model.safetensors", "adapter/adapter_config.json",
                      "eval_results.txt", "test_results.tsv")


@pytest.fixture(scope="module")
def mrpc(mrpc_lines, tmp_path_factory):
    return write_mrpc_dir(tmp_path_factory.mktemp("resume_mrpc"), mrpc_lines)


def classifier_argv(backbone, out, data):
    # 96 examples at batch 16: 6 steps, checkpoints after steps 2, 4 and 6.
    return ["--do_train", "--do_eval", "--do_predict", *DETERMINISTIC,
            *classifier_flags(backbone, out, data)]


@pytest.fixture(scope="module")
def classifier_reference(backbone, mrpc, tmp_path_factory):
    out = tmp_path_factory.mktemp("classifier_reference") / "out"
    run_to_completion("run_classifier.py", classifier_argv(backbone, out, mrpc), [])
    return read_bytes(out, CLASSIFIER_OUTPUTS)


@pytest.mark.slow
@pytest.mark.parametrize("kills", [
    # Killed after step 1 (before the first checkpoint: the next run starts over), after
    # step 3 (between checkpoints 2 and 4), after step 5 (between 4 and 6), then completed.
    [{"KILL_AT_STEP": 1}, {"KILL_AT_STEP": 3}, {"KILL_AT_STEP": 5}],
    # Killed during the dev-set evaluation, then during the test-set prediction.
    [{"KILL_PREDICTING": 1}, {"KILL_PREDICTING": 2}],
], ids=["training-between-checkpoints", "evaluating-then-predicting"])
def test_classifier_resumes_to_bit_identical_outputs(classifier_reference, backbone, mrpc,
                                                     tmp_path, kills):
    out = tmp_path / "out"
    finished = run_to_completion("run_classifier.py", classifier_argv(backbone, out, mrpc), kills)
    assert "Op determinism enabled (--deterministic) with seed 7" in finished.stderr
    if "KILL_AT_STEP" in kills[-1]:
        restored = kills[-1]["KILL_AT_STEP"] // 2 * 2   # the checkpoint before the kill
        assert f"steps {restored + 1}..6 of 6" in finished.stderr
    else:
        assert "Training already complete (6 of 6 steps)" in finished.stderr
    got = read_bytes(out, CLASSIFIER_OUTPUTS)
    for name in CLASSIFIER_OUTPUTS:
        assert got[name] == classifier_reference[name], name


# ------------------------------------------------------------------------------- SQuAD

SQUAD_OUTPUTS = ("adapter/adapter_model.safetensors", "predictions.json",
                 "nbest_predictions.json")


@pytest.fixture(scope="module")
def squad_files(squad_dir, squad_slice, tmp_path_factory):
    """Training: the first article of the written training subset; prediction: squad_slice."""
    root = tmp_path_factory.mktemp("resume_squad")
    data = json.loads((squad_dir / "train-v1.1-subset.json").read_text("utf-8"))
    article = data["data"][0]
    train = root / "train.json"
    train.write_text(json.dumps({"version": "1.1", "data": [
        dict(article, paragraphs=article["paragraphs"][:2])]}))
    predict = root / "predict.json"
    predict.write_text(json.dumps(squad_slice))
    return train, predict


def squad_argv(backbone, out, files):
    train, predict = files
    return ["--do_train", "--do_predict", f"--train_file={train}", f"--predict_file={predict}",
            *DETERMINISTIC, *squad_flags(backbone, out, save_checkpoints_steps=3)]


@pytest.fixture(scope="module")
def squad_reference(backbone, squad_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("squad_reference") / "out"
    finished = run_to_completion("run_squad.py", squad_argv(backbone, out, squad_files), [])
    results = json.loads((out / "eval_results.json").read_text())
    assert results["global_step"] >= 5, results   # room for a kill between checkpoints
    return read_bytes(out, SQUAD_OUTPUTS), finished


@pytest.mark.slow
@pytest.mark.parametrize("kills", [
    [{"KILL_AT_STEP": 4}],           # between checkpoints 3 and 6
    [{"KILL_PREDICTING": 1}],        # during prediction, training complete
], ids=["between-checkpoints", "predicting"])
def test_squad_resumes_to_bit_identical_outputs(squad_reference, backbone, squad_files,
                                                tmp_path, kills):
    reference, _ = squad_reference
    out = tmp_path / "out"
    finished = run_to_completion("run_squad.py", squad_argv(backbone, out, squad_files), kills)
    if "KILL_AT_STEP" in kills[0]:
        assert "Restored" in finished.stderr and "steps 4.." in finished.stderr
    got = read_bytes(out, SQUAD_OUTPUTS)
    for name in SQUAD_OUTPUTS:
        assert got[name] == reference[name], name
