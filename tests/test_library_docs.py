"""docs/library.md runs as written: its python snippets, top to bottom, as one script;
so does README.md's library example, which prints the parameter line its prose states.

A snippet's output is the `text` block right after it when the line between them ends
with "prints". Two runs:
- on a tiny random backbone standing in for the embedded MiniLM (every snippet, Keras
  saving included; outputs that name no parameter count are compared);
- on the real MiniLM (marker `realweights`), every snippet up to "Several tasks on one
  backbone", with every output compared, parameter counts included.
"""

import contextlib
import io
import json
import re

import pytest

from tests.conftest import BERT_VOCAB, REPO

DOC = REPO / "docs" / "library.md"
README = REPO / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
# The first section the real-weights run leaves out (each later one loads MiniLM again or
# saves the whole model: minutes on two cores).
_REAL_RUN_ENDS = "## Several tasks on one backbone"


def snippets(text: str):
    """[(code, expected output or None, offset)] of the python blocks of `text`."""
    blocks = list(_FENCE.finditer(text))
    found = []
    for index, block in enumerate(blocks):
        if block.group(1) != "python":
            continue
        expected = None
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        if following is not None and following.group(1) in ("", "text") and \
                text[block.end():following.start()].strip().endswith("prints"):
            expected = following.group(2)
        found.append((block.group(2), expected, block.start()))
    return found


def run_snippets(selected, compare):
    """Runs the snippets in one namespace; checks outputs where `compare(expected)`."""
    namespace = {"__name__": "library_md"}
    for code, expected, offset in selected:
        where = f"docs/library.md line {DOC.read_text()[:offset].count(chr(10)) + 1}"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, where, "exec"), namespace)  # noqa: S102 - the doc's own code
        if expected is not None and compare(expected):
            got = [line.rstrip() for line in out.getvalue().strip("\n").splitlines()]
            assert got == [line.rstrip() for line in expected.strip("\n").splitlines()], where
    return namespace


def test_the_doc_has_snippets_with_outputs():
    found = snippets(DOC.read_text())
    assert len(found) >= 10
    assert sum(expected is not None for _, expected, _ in found) >= 6
    assert any("ab.load_adapter(" in code for code, _, _ in found)


EMOTIONS = ("anger", "boredom", "empty", "enthusiasm", "fun", "happiness", "hate", "love",
            "neutral", "relief", "sadness", "surprise", "worry")


def write_own_data(folder):
    """The two files "Your own data in Keras" reads: `SMSSpamCollection` (`label<TAB>text`,
    no header, every fifth row spam) and `text_emotion.csv` (13 classes, a header, extra
    columns, texts with commas, quotes and newlines)."""
    import csv
    rows = [("spam", f"WIN a free prize {i}, call now") if i % 5 == 0
            else ("ham", f'see you at "{i}" o\'clock') for i in range(240)]
    (folder / "SMSSpamCollection").write_text("".join(f"{a}\t{b}\n" for a, b in rows))
    with open(folder / "text_emotion.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["tweet_id", "sentiment", "author", "content"])
        for i in range(130):
            emotion = EMOTIONS[i % 13]
            writer.writerow([1000 + i, emotion, f"user{i}", f'so "{emotion}",\ntoday {i}'])


def check_own_data_results(namespace, folder):
    assert {"accuracy", "macro_f1", "mcc", "precision", "recall", "f1", "loss",
            "per_class"} == set(namespace["spam_scores"])
    assert set(namespace["spam_scores"]["per_class"]) == {"ham", "spam", "macro avg",
                                                          "weighted avg"}
    assert namespace["spam_predicted"][0] in ("ham", "spam")
    assert set(namespace["emotion_predicted"]) <= set(EMOTIONS)
    assert namespace["emotion"].labels == EMOTIONS
    saved = json.loads((folder / "adapters" / "emotion" / "adapter_config.json").read_text())
    assert saved["labels"] == list(EMOTIONS) and saved["task"] == "emotion"
    # Keras' contract: a History of the epochs trained, and the best epoch's file.
    history = namespace["spam_history"]
    assert 1 <= len(history.epoch) <= 3 and namespace["val_auc"] == history.history["val_auc"]
    assert {"loss", "auc", "f1", "val_loss", "val_f1"} <= set(history.history)
    assert (folder / "spam_best.keras").is_file() and (folder / "spam.keras").is_file()


@pytest.mark.slow
def test_every_snippet_runs_on_a_tiny_backbone(tmp_path, monkeypatch):
    from adapter_bert.model import checkpoints
    from tests.runner_utils import write_tiny_backbone
    tiny = write_tiny_backbone(tmp_path / "tiny_backbone", BERT_VOCAB)
    monkeypatch.setattr(checkpoints, "default_backbone_dir", lambda: str(tiny))
    monkeypatch.chdir(tmp_path)
    write_own_data(tmp_path)
    namespace = run_snippets(snippets(DOC.read_text()),
                             compare=lambda expected: "params" not in expected)
    check_own_data_results(namespace, tmp_path)
    assert namespace["model"].adapter_names == ["mrpc", "sst2", "para"]
    assert namespace["model"].bert.merged_adapters() == []
    assert (tmp_path / "adapters" / "mrpc" / "adapter_model.safetensors").is_file()
    para = json.loads((tmp_path / "adapters" / "para" / "adapter_config.json").read_text())
    assert para["adapter_config"]["lora_targets"] == ["query", "value", "intermediate"]
    assert para["adapter_config"]["lora_dropout"] == 0.1
    assert namespace["history"].history["loss"][-1] > 0


@pytest.mark.slow
@pytest.mark.realweights
def test_the_first_sections_print_what_the_doc_says_on_minilm(minilm_dir, tmp_path,
                                                             monkeypatch):
    text = DOC.read_text()
    end = text.index(_REAL_RUN_ENDS)
    monkeypatch.chdir(tmp_path)
    write_own_data(tmp_path)
    namespace = run_snippets([s for s in snippets(text) if s[2] < end],
                             compare=lambda expected: True)
    check_own_data_results(namespace, tmp_path)
    # The spam words give the class away: MiniLM's adapters learn them in 3 epochs.
    assert namespace["spam_scores"]["accuracy"] == 1.0


def test_runner_and_two_line_paths_the_doc_describes(tmp_path, monkeypatch):
    """The forms the doc states in prose: a runner's directory and the two-line load."""
    import numpy as np

    import adapter_bert as ab
    from adapter_bert.model import checkpoints
    from tests.runner_utils import write_tiny_backbone
    tiny = write_tiny_backbone(tmp_path / "tiny_backbone", BERT_VOCAB)
    monkeypatch.setattr(checkpoints, "default_backbone_dir", lambda: str(tiny))
    monkeypatch.chdir(tmp_path)
    run_model = ab.load_pretrained(adapter_config=ab.AdapterConfig(size=4), head="classifier")
    ab.apply_tuning(run_model, "adapter")
    for variable in run_model.trainable_weights:
        variable.assign_add(np.full(variable.shape, 0.01, "float32"))
    run_model.save_adapter("adapters/run")
    features = {"input_ids": np.array([[101, 2023, 2003, 102, 0]], "int32"),
                "input_mask": np.array([[1, 1, 1, 1, 0]], "int32")}
    loaded = ab.load_adapter("adapters/run")
    np.testing.assert_array_equal(loaded(features, training=False),
                                  run_model(features, training=False))
    model = ab.load_pretrained(head="classifier")
    assert model.load_adapter("adapters/run", name="mrpc") == "mrpc"
    np.testing.assert_array_equal(model(features, training=False),
                                  run_model(features, training=False))
    from adapter_bert.errors import CheckpointError
    with pytest.raises(CheckpointError, match=re.escape(
            "adapters/run is an adapter directory, not a backbone: load it with "
            "ab.load_adapter('adapters/run')")):
        ab.load_pretrained("adapters/run")


def readme_example():
    """(README's "Using the library" python block, the parameter line its prose states)."""
    text = README.read_text()
    section = text[text.index("## Using the library\n"):]
    section = section[:section.index("\n## ", 1)]
    code = _FENCE.search(section).group(2)
    stated = re.search(r"`from_pretrained` prints `(trainable params:[^`]*)`", section, re.S)
    return code, " ".join(stated.group(1).split())


def run_readme(tmp_path):
    """Runs README's example in `tmp_path`; (its namespace, what it printed)."""
    code, _ = readme_example()
    namespace = {"__name__": "readme"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's code
    return namespace, out.getvalue()


@pytest.mark.slow
def test_the_readme_example_runs_on_a_tiny_backbone(tmp_path, monkeypatch):
    from adapter_bert.model import checkpoints
    from tests.runner_utils import write_tiny_backbone
    tiny = write_tiny_backbone(tmp_path / "tiny_backbone", BERT_VOCAB)
    monkeypatch.setattr(checkpoints, "default_backbone_dir", lambda: str(tiny))
    monkeypatch.chdir(tmp_path)
    namespace, printed = run_readme(tmp_path)
    lines = printed.splitlines()   # with Keras' progress bars between the prints
    assert lines[0].startswith("trainable params: ")
    accuracy = [line for line in lines if re.fullmatch(r"[01]\.[0-9]+", line)]
    assert len(accuracy) == 1 and 0 <= float(accuracy[0]) <= 1
    assert lines[-1] in ("['negative']", "['neutral']", "['positive']")
    assert (tmp_path / "adapters" / "tweets" / "adapter_model.safetensors").is_file()
    model, same, texts = namespace["model"], namespace["same"], namespace["texts"]
    assert same.labels == model.labels == ("negative", "neutral", "positive")
    assert (same.predict(texts) == model.predict(texts)).all()


@pytest.mark.slow
@pytest.mark.realweights
def test_the_readme_example_prints_what_its_prose_says_on_minilm(minilm_dir, tmp_path,
                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, stated = readme_example()
    _, printed = run_readme(tmp_path)
    assert printed.splitlines()[0] == stated
    assert stated.startswith("trainable params: 754,179 ||")
