"""Tests for adapter_bert.data.glue: the TSV processors on written files (and real ones in
the realdata group), and bad input. The TFDS path is tests/test_tfds_text.py."""

import collections

import pytest

from adapter_bert.data import glue, tfds_text

from tests.conftest import BERT_VOCAB, real_file
from tests.fixtures import GLUE_ROWS


@pytest.fixture(scope="module")
def real_glue(real_data):
    """The real glue folder of the realdata group."""
    return real_file(real_data, "glue")


def _task_dir(real_glue, task):
    return str(real_file(real_glue, task))


# ---------------------------------------------------------------------------
# Written files: every task's layout as tests/fixtures.py writes it.

WRITTEN_SPLITS = [(task, split, rows) for task, splits in GLUE_ROWS.items()
                  for split, rows in splits.items()]


@pytest.mark.parametrize("task,split,count", WRITTEN_SPLITS)
def test_written_split_counts_and_labels(written_data, task, split, count):
    processor = glue.get_processor("ax" if task == "diagnostic" else task)
    split = "test" if task == "diagnostic" else split
    examples = processor.get_examples(str(written_data / "glue" / task), split)
    assert len(examples) == count
    assert len({e.guid for e in examples}) == count
    assert all(e.guid.startswith(split.split("_")[0] + "-") for e in examples)
    labels = {e.label for e in examples}
    if split.startswith("test"):
        assert labels == {None}
    elif task == "STS-B":
        assert all(isinstance(label, float) and 0.0 <= label <= 5.0 for label in labels)
    else:
        assert labels == set(processor.get_labels())  # every label occurs
    pair = task not in ("CoLA", "SST-2")
    assert all((e.text_b is not None) == pair for e in examples)
    assert all(e.text_a for e in examples)


def test_written_first_examples(written_data):
    """The first data line of each file is example 0: after MRPC's BOM and header, on
    CoLA's headerless line 1, with SST-2's trailing space kept."""
    def first_line(task, name, encoding="utf-8"):
        text = (written_data / "glue" / task / name).read_text(encoding=encoding)
        return text.splitlines()[0 if task == "CoLA" and name != "test.tsv" else 1].split("\t")
    assert (written_data / "glue/MRPC/train.tsv").read_bytes().startswith(b"\xef\xbb\xbfQuality")
    row = first_line("MRPC", "train.tsv", "utf-8-sig")
    assert glue.MrpcProcessor().get_train_examples(str(written_data / "glue/MRPC"))[0] == \
        glue.InputExample("train-0", row[3], row[4], row[0])
    row = first_line("CoLA", "train.tsv")
    assert glue.ColaProcessor().get_train_examples(str(written_data / "glue/CoLA"))[0] == \
        glue.InputExample("train-0", row[3], None, row[1])
    row = first_line("CoLA", "test.tsv")
    assert glue.ColaProcessor().get_test_examples(str(written_data / "glue/CoLA"))[0] == \
        glue.InputExample("test-" + row[0], row[1], None, None)
    sst = glue.Sst2Processor().get_dev_examples(str(written_data / "glue/SST-2"))[0]
    assert sst.text_a == first_line("SST-2", "dev.tsv")[0] and sst.text_a.endswith(" . ")
    row = first_line("RTE", "train.tsv")
    assert glue.RteProcessor().get_train_examples(str(written_data / "glue/RTE"))[0] == \
        glue.InputExample("train-" + row[0], row[1], row[2], row[3])


# ---------------------------------------------------------------------------
# Real files (realdata group): row counts and label counts of GLUE's published splits.

REAL_SPLITS = [
    ("MRPC", "train", 3668, {"0": 1194, "1": 2474}),
    ("MRPC", "dev", 408, {"0": 129, "1": 279}),
    ("MRPC", "test", 1725, {None: 1725}),
    ("CoLA", "train", 8551, {"0": 2528, "1": 6023}),
    ("CoLA", "dev", 1043, {"0": 322, "1": 721}),
    ("CoLA", "test", 1063, {None: 1063}),
    ("SST-2", "train", 67349, {"0": 29780, "1": 37569}),
    ("SST-2", "dev", 872, {"0": 428, "1": 444}),
    ("SST-2", "test", 1821, {None: 1821}),
    ("RTE", "train", 2490, {"entailment": 1249, "not_entailment": 1241}),
    ("RTE", "dev", 277, {"entailment": 146, "not_entailment": 131}),
    ("RTE", "test", 3000, {None: 3000}),
    ("WNLI", "train", 635, {"0": 323, "1": 312}),
    ("WNLI", "dev", 71, {"0": 40, "1": 31}),
    ("WNLI", "test", 146, {None: 146}),
]


@pytest.mark.realdata
@pytest.mark.parametrize("task,split,count,label_counts", REAL_SPLITS)
def test_real_split_counts_and_labels(real_glue, task, split, count, label_counts):
    processor = glue.get_processor(task)
    examples = getattr(processor, f"get_{split}_examples")(_task_dir(real_glue, task))
    assert len(examples) == count
    assert dict(collections.Counter(e.label for e in examples)) == label_counts
    assert len({e.guid for e in examples}) == count
    assert all(e.guid.startswith(split + "-") for e in examples)
    pair = task in ("MRPC", "RTE", "WNLI")
    assert all((e.text_b is not None) == pair for e in examples)
    assert all(e.text_a for e in examples)


@pytest.mark.realdata
def test_real_first_examples(real_glue):
    mrpc = glue.MrpcProcessor()
    first = mrpc.get_train_examples(_task_dir(real_glue, "MRPC"))[0]
    assert first == glue.InputExample(
        guid="train-0",
        text_a=('Amrozi accused his brother , whom he called " the witness " '
                ", of deliberately distorting his evidence ."),
        text_b=('Referring to him as only " the witness " , Amrozi accused '
                "his brother of deliberately distorting his evidence ."),
        label="1")
    test0 = mrpc.get_test_examples(_task_dir(real_glue, "MRPC"))[0]
    assert test0.guid == "test-0" and test0.label is None
    assert test0.text_a.startswith("PCCW 's chief operating officer")

    cola = glue.ColaProcessor().get_train_examples(_task_dir(real_glue, "CoLA"))
    assert cola[0].text_a == ("Our friends won't buy this analysis, let alone "
                              "the next one we propose.")
    assert cola[0].label == "1" and cola[0].text_b is None
    assert cola[-1].text_a == "What all did you get for Christmas?"
    cola_test = glue.ColaProcessor().get_test_examples(_task_dir(real_glue, "CoLA"))
    assert cola_test[0].text_a == "Bill whistled past the house."

    sst = glue.Sst2Processor().get_dev_examples(_task_dir(real_glue, "SST-2"))
    assert sst[0].text_a == "it 's a charming and often affecting journey . "
    assert sst[0].label == "1"

    rte = glue.RteProcessor().get_train_examples(_task_dir(real_glue, "RTE"))
    assert rte[0].text_a == "No Weapons of Mass Destruction Found in Iraq Yet."
    assert rte[0].text_b == "Weapons of Mass Destruction Found in Iraq."
    assert rte[0].label == "not_entailment"
    # An example whose text has an unbalanced quote is still one row.
    rte_dev = glue.RteProcessor().get_dev_examples(_task_dir(real_glue, "RTE"))
    assert rte_dev[-1].text_a.startswith('Danny Kennedy, Greenpeace campaigns '
                                         'director, said: "The bur')

    wnli = glue.WnliProcessor().get_dev_examples(_task_dir(real_glue, "WNLI"))
    assert wnli[0].text_a == ("The drain is clogged with hair. It has to be "
                              "cleaned.")
    assert wnli[0].text_b == "The hair has to be cleaned."
    assert wnli[0].label == "0"


def test_labels_and_regression_flags():
    expected = {
        "cola": ["0", "1"], "sst-2": ["0", "1"], "mrpc": ["0", "1"],
        "sts-b": [], "qqp": ["0", "1"],
        "mnli": ["contradiction", "entailment", "neutral"],
        "qnli": ["entailment", "not_entailment"],
        "rte": ["entailment", "not_entailment"], "wnli": ["0", "1"],
        "ax": ["contradiction", "entailment", "neutral"],
        "xnli": ["contradiction", "entailment", "neutral"],
    }
    assert set(glue.PROCESSORS) == set(expected)
    for name, labels in expected.items():
        processor = glue.get_processor(name)
        assert processor.get_labels() == labels
        assert processor.is_regression == (name == "sts-b")


def test_get_processor_names():
    assert isinstance(glue.get_processor("MRPC"), glue.MrpcProcessor)
    assert isinstance(glue.get_processor("Sst2"), glue.Sst2Processor)
    assert isinstance(glue.get_processor("SST-2"), glue.Sst2Processor)
    assert isinstance(glue.get_processor("stsb"), glue.StsbProcessor)
    assert isinstance(glue.get_processor("STS-B"), glue.StsbProcessor)
    with pytest.raises(ValueError) as info:
        glue.get_processor("squad")
    message = str(info.value)
    assert "'squad'" in message
    for name in ("cola", "mrpc", "mnli", "sst-2", "sts-b", "ax"):
        assert name in message


# ---------------------------------------------------------------------------
# Synthetic files in the public glue_data layout, row by row.

def _write(path, lines, encoding="utf-8"):
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))
    return path


def _tsv(*fields):
    return "\t".join(str(f) for f in fields)


def test_stsb_tmp(tmp_path):
    header = _tsv("index", "genre", "filename", "year", "old_index",
                  "source1", "source2", "sentence1", "sentence2", "score")
    rows = [_tsv(0, "main-captions", "MSRvid", "2012test", "0001", "none",
                 "none", "A plane is taking off.",
                 "An air plane is taking off.", "5.000"),
            _tsv(1, "main-captions", "MSRvid", "2012test", "0004", "none",
                 "none", "A man is playing a flute.", "A man plays a flute.",
                 "3.800")]
    _write(tmp_path / "train.tsv", [header] + rows)
    _write(tmp_path / "dev.tsv", [header] + rows[1:])
    _write(tmp_path / "test.tsv", [header.rsplit("\t", 1)[0],
                                   rows[0].rsplit("\t", 1)[0]])
    processor = glue.get_processor("sts-b")
    train = processor.get_train_examples(str(tmp_path))
    assert train == [
        glue.InputExample("train-0", "A plane is taking off.",
                          "An air plane is taking off.", 5.0),
        glue.InputExample("train-1", "A man is playing a flute.",
                          "A man plays a flute.", 3.8)]
    assert isinstance(train[1].label, float)
    assert processor.get_dev_examples(str(tmp_path))[0].label == 3.8
    test = processor.get_test_examples(str(tmp_path))
    assert test == [glue.InputExample("test-0", "A plane is taking off.",
                                      "An air plane is taking off.", None)]


def test_qqp_tmp(tmp_path):
    header = _tsv("id", "qid1", "qid2", "question1", "question2",
                  "is_duplicate")
    _write(tmp_path / "train.tsv", [
        header,
        _tsv(133273, 213221, 213222, "How is the life of a math student?",
             "Which level of prepration is enough?", 0),
        _tsv(402555, 536040, 536041, "How do I control my horny emotions?",
             "How do you control your horniness?", 1)])
    _write(tmp_path / "dev.tsv", [header, _tsv(7, 1, 2, "q a", "q b", 1)])
    _write(tmp_path / "test.tsv", [_tsv("id", "question1", "question2"),
                                   _tsv(0, "Why do rockets look white?",
                                        "Why are rockets white?")])
    processor = glue.get_processor("QQP")
    train = processor.get_train_examples(str(tmp_path))
    assert [(e.guid, e.label) for e in train] == [("train-133273", "0"),
                                                  ("train-402555", "1")]
    assert train[1].text_a == "How do I control my horny emotions?"
    assert train[1].text_b == "How do you control your horniness?"
    assert processor.get_dev_examples(str(tmp_path)) == [
        glue.InputExample("dev-7", "q a", "q b", "1")]
    assert processor.get_test_examples(str(tmp_path)) == [
        glue.InputExample("test-0", "Why do rockets look white?",
                          "Why are rockets white?", None)]


def _mnli_row(index, s1, s2, labels=(), test=False):
    fields = [index, 31193, f"{31193}n", "government", "( ( bp1 ) )",
              "( ( bp2 ) )", "(ROOT (S p1))", "(ROOT (S p2))", s1, s2]
    return _tsv(*(fields if test else fields + list(labels)))


def test_mnli_tmp_matched_and_mismatched(tmp_path):
    head10 = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
              "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
              "sentence1", "sentence2"]
    _write(tmp_path / "train.tsv", [
        _tsv(*head10, "label1", "gold_label"),
        _mnli_row(0, "Conceptually cream skimming has two dimensions.",
                  "Product and geography are what make cream skimming work.",
                  ["neutral", "neutral"]),
        _mnli_row(1, "you know during the season", "You lose the things",
                  ["entailment", "entailment"])])
    dev_header = _tsv(*head10, "label1", "label2", "label3", "label4",
                      "label5", "gold_label")
    _write(tmp_path / "dev_matched.tsv", [
        dev_header,
        _mnli_row(0, "m premise", "m hypothesis",
                  ["neutral", "entailment", "neutral", "neutral", "neutral",
                   "neutral"])])
    _write(tmp_path / "dev_mismatched.tsv", [
        dev_header,
        _mnli_row(5, "mm premise", "mm hypothesis",
                  ["contradiction"] * 5 + ["contradiction"])])
    _write(tmp_path / "test_matched.tsv", [
        _tsv(*head10), _mnli_row(0, "tm premise", "tm hyp", test=True)])
    _write(tmp_path / "test_mismatched.tsv", [
        _tsv(*head10), _mnli_row(9, "tmm premise", "tmm hyp", test=True)])
    processor = glue.get_processor("mnli")
    d = str(tmp_path)
    train = processor.get_train_examples(d)
    assert [(e.guid, e.label) for e in train] == [("train-0", "neutral"),
                                                  ("train-1", "entailment")]
    assert train[0].text_a == "Conceptually cream skimming has two dimensions."
    assert train[0].text_b == ("Product and geography are what make cream "
                               "skimming work.")
    matched = glue.InputExample("dev-0", "m premise", "m hypothesis", "neutral")
    assert processor.get_dev_examples(d) == [matched]
    assert processor.get_examples(d, "dev_matched") == [matched]
    mismatched = [glue.InputExample("dev-5", "mm premise", "mm hypothesis",
                                    "contradiction")]
    assert processor.get_examples(d, "dev_mismatched") == mismatched
    assert processor.get_test_examples(d) == [
        glue.InputExample("test-0", "tm premise", "tm hyp", None)]
    assert processor.get_examples(d, "test_mismatched") == [
        glue.InputExample("test-9", "tmm premise", "tmm hyp", None)]
    # The 16-column dev layout is required for dev files.
    _write(tmp_path / "dev_matched.tsv", [
        dev_header, _mnli_row(0, "a", "b", ["neutral", "neutral"])])
    with pytest.raises(glue.GlueDataError,
                       match=r"dev_matched\.tsv line 2: expected at least 16 "
                             r"tab-separated columns, found 12"):
        processor.get_dev_examples(d)


def test_qnli_tmp(tmp_path):
    _write(tmp_path / "train.tsv", [
        _tsv("index", "question", "sentence", "label"),
        _tsv(0, "When did the third Digimon series begin?",
             "Unlike the two seasons before it, ...", "not_entailment"),
        _tsv(1, "Which missile batteries often have individual launchers?",
             "When MANPADS is operated ...", "entailment")])
    _write(tmp_path / "test.tsv", [_tsv("index", "question", "sentence"),
                                   _tsv(0, '"What is it?', "It is.")])
    processor = glue.get_processor("qnli")
    train = processor.get_train_examples(str(tmp_path))
    assert [e.label for e in train] == ["not_entailment", "entailment"]
    assert train[0].text_a == "When did the third Digimon series begin?"
    # A stray leading quote (as in the real QNLI test.tsv) is kept verbatim.
    assert processor.get_test_examples(str(tmp_path)) == [
        glue.InputExample("test-0", '"What is it?', "It is.", None)]


def test_ax_tmp(tmp_path):
    _write(tmp_path / "diagnostic.tsv", [
        _tsv("index", "sentence1", "sentence2"),
        _tsv(0, "The cat sat on the mat.", "The cat did not sit on the mat."),
        _tsv(1, "The cat did not sit on the mat.", "The cat sat on the mat.")])
    processor = glue.get_processor("AX")
    examples = processor.get_test_examples(str(tmp_path))
    assert examples == [
        glue.InputExample("test-0", "The cat sat on the mat.",
                          "The cat did not sit on the mat.", None),
        glue.InputExample("test-1", "The cat did not sit on the mat.",
                          "The cat sat on the mat.", None)]
    assert processor.get_labels() == glue.MnliProcessor().get_labels()
    with pytest.raises(glue.GlueDataError, match=r"AX has no split 'train'"):
        processor.get_train_examples(str(tmp_path))


def _xnli_dev_row(language, label, premise, hypothesis, pair_id):
    """A row of XNLI 1.0's xnli.dev.tsv (sentence1/2 in columns 6 and 7)."""
    return _tsv(language, label, "", "", "", pair_id, premise, hypothesis,
                premise + " .", hypothesis + " .", "", "", "", "", label)


def test_xnli_tmp(tmp_path):
    """Google's layout: multinli/multinli.train.<lang>.tsv and xnli.dev.tsv filtered by
    language (default zh); "contradictory" is "contradiction" in train."""
    (tmp_path / "multinli").mkdir()
    _write(tmp_path / "multinli" / "multinli.train.zh.tsv", [
        _tsv("premise", "hypo", "label"),
        _tsv("他说 , 妈妈 , 我 回来 了 。", "他 一 回来 就 说 。", "neutral"),
        _tsv("我 不 知道 。", "我 知道 。", "contradictory"),
        _tsv("我们 走 吧 。", "我们 要 走 。", "entailment")])
    _write(tmp_path / "multinli" / "multinli.train.de.tsv", [
        _tsv("premise", "hypo", "label"),
        _tsv("Ich weiß es nicht .", "Ich weiß es .", "contradictory")])
    header = _tsv("language", "gold_label", "sentence1_binary_parse",
                  "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                  "sentence1", "sentence2", "promptID", "pairID", "genre", "label1",
                  "label2", "label3", "label4")
    _write(tmp_path / "xnli.dev.tsv", [
        header,
        _xnli_dev_row("en", "neutral", "He came home.", "He was happy.", 1),
        _xnli_dev_row("zh", "entailment", "他 回家 了 。", "他 在 家 。", 2),
        _xnli_dev_row("de", "contradiction", "Er kam nach Hause.", "Er blieb weg.", 3),
        _xnli_dev_row("zh", "contradiction", "他 回家 了 。", "他 没 回家 。", 4)])
    processor = glue.get_processor("XNLI")
    assert isinstance(processor, glue.XnliProcessor) and processor.language == "zh"
    assert processor.get_labels() == ["contradiction", "entailment", "neutral"]
    train = processor.get_train_examples(str(tmp_path))
    assert [e.label for e in train] == ["neutral", "contradiction", "entailment"]
    assert train[1] == glue.InputExample("train-1", "我 不 知道 。", "我 知道 。",
                                         "contradiction")
    dev = processor.get_dev_examples(str(tmp_path))
    assert dev == [glue.InputExample("dev-1", "他 回家 了 。", "他 在 家 。", "entailment"),
                   glue.InputExample("dev-3", "他 回家 了 。", "他 没 回家 。", "contradiction")]
    german = glue.XnliProcessor("de")
    assert [e.label for e in german.get_train_examples(str(tmp_path))] == ["contradiction"]
    assert [e.text_b for e in german.get_dev_examples(str(tmp_path))] == ["Er blieb weg."]
    with pytest.raises(glue.GlueDataError, match=r"XNLI has no split 'test'"):
        processor.get_test_examples(str(tmp_path))
    with pytest.raises(glue.GlueDataError, match=r"multinli.train.fr.tsv"):
        glue.XnliProcessor("fr").get_train_examples(str(tmp_path))
    with pytest.raises(glue.GlueDataError, match=r"not part of TFDS glue"):
        tfds_text.load_glue_examples("xnli", "train")
    # the features are sentence pairs like MNLI's
    from adapter_bert.data.tokenization import load_tokenizer
    tokenizer = load_tokenizer(str(BERT_VOCAB))
    features = glue.convert_examples_to_features(dev, processor.get_labels(), 16, tokenizer)
    assert features["label_ids"].tolist() == [1, 0]
    assert features["segment_ids"][:, -1].tolist() == [0, 0]
    assert (features["segment_ids"].sum(1) > 0).all()


def test_crlf_lines_and_bom(tmp_path):
    (tmp_path / "train.tsv").write_bytes(
        "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"
        "1\t1\t2\ta \" b\tc\r\n0\t3\t4\td\te\r\n".encode("utf-8"))
    examples = glue.MrpcProcessor().get_train_examples(str(tmp_path))
    assert examples == [glue.InputExample("train-0", 'a " b', "c", "1"),
                        glue.InputExample("train-1", "d", "e", "0")]


# ---------------------------------------------------------------------------
# Bad input: errors name the file and the line.

MRPC_HEADER = _tsv("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        glue.MrpcProcessor().get_dev_examples(str(tmp_path))
    assert isinstance(info.value, glue.GlueDataError)
    assert str(tmp_path / "dev.tsv") in str(info.value)


def test_too_few_columns(tmp_path):
    path = _write(tmp_path / "train.tsv", [
        MRPC_HEADER, _tsv(1, 1, 2, "a", "b"), _tsv(0, 3, "only three")])
    with pytest.raises(glue.GlueDataError) as info:
        glue.MrpcProcessor().get_train_examples(str(tmp_path))
    assert str(info.value) == (
        f"MRPC {path} line 3: expected at least 5 tab-separated columns, "
        "found 3")


def test_blank_lines_are_skipped_and_later_lines_keep_their_numbers(tmp_path):
    path = _write(tmp_path / "train.tsv", ["sentence\tlabel", "good\t1", "", "bad\t0",
                                           "short"])
    with pytest.raises(glue.GlueDataError) as info:
        glue.Sst2Processor().get_train_examples(str(tmp_path))
    assert str(info.value) == (
        f"SST-2 {path} line 5: expected at least 2 tab-separated columns, found 1")
    _write(tmp_path / "train.tsv", ["sentence\tlabel", "good\t1", "", "bad\t0"])
    examples = glue.Sst2Processor().get_train_examples(str(tmp_path))
    assert [(e.guid, e.text_a, e.label) for e in examples] == [("train-0", "good", "1"),
                                                                ("train-1", "bad", "0")]


def test_unknown_label(tmp_path):
    path = _write(tmp_path / "dev.tsv", [
        _tsv("index", "sentence1", "sentence2", "label"),
        _tsv(0, "a", "b", "entailment"), _tsv(1, "c", "d", "neutral")])
    with pytest.raises(glue.GlueDataError) as info:
        glue.RteProcessor().get_dev_examples(str(tmp_path))
    assert str(info.value) == (
        f"RTE {path} line 3: unknown label 'neutral'; allowed labels: "
        "entailment, not_entailment")


def test_non_numeric_regression_label(tmp_path):
    path = _write(tmp_path / "train.tsv", [
        _tsv(*["h"] * 10), _tsv(0, *["x"] * 6, "s1", "s2", "high")])
    with pytest.raises(glue.GlueDataError) as info:
        glue.StsbProcessor().get_train_examples(str(tmp_path))
    assert str(info.value) == f"STS-B {path} line 2: label 'high' is not a number"


def test_empty_file(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b"")
    with pytest.raises(glue.GlueDataError) as info:
        glue.ColaProcessor().get_train_examples(str(tmp_path))
    assert str(info.value) == f"CoLA {path}: file is empty"


def test_header_only_file(tmp_path):
    path = _write(tmp_path / "dev.tsv", ["sentence\tlabel"])
    with pytest.raises(glue.GlueDataError) as info:
        glue.Sst2Processor().get_dev_examples(str(tmp_path))
    assert str(info.value) == f"SST-2 {path}: file has a header but no examples"


def test_non_utf8_bytes(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b"gj04\t1\t\tfine.\ngj04\t0\t*\talso fine.\n"
                     b"gj04\t1\t\tcaf\xe9 latin-1.\n")
    with pytest.raises(glue.GlueDataError) as info:
        glue.ColaProcessor().get_train_examples(str(tmp_path))
    assert str(info.value) == (
        f"CoLA {path} line 3: not valid UTF-8 (byte 0xe9 at byte column 12); "
        f"save the file as UTF-8")


def test_unknown_split(tmp_path):
    with pytest.raises(glue.GlueDataError, match=r"MRPC has no split 'val'"):
        glue.MrpcProcessor().get_examples(str(tmp_path), "val")
