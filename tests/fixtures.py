"""Small GLUE and SQuAD files that the tests write themselves.

The suite needs no data folder: every format, pipeline, error, serving and TPU-shape
test reads files written here, into pytest's temporary folders, by the fixtures of
tests/conftest.py (`written_data`, `mrpc_dir`, `squad_dir`). Only the `realdata` group
(see tests/conftest.py) reads real GLUE and SQuAD files.

The text is English written for these tests: sentences are assembled from hand-written
parts by a seeded `random.Random`, so a run always writes the same bytes. The files
follow the layouts that `download_glue_data.py` and the SQuAD site publish, byte for
byte where it matters to a reader:

- GLUE: one folder per task with `train.tsv`, `dev.tsv` and `test.tsv` (MNLI:
  `dev_matched.tsv`, `dev_mismatched.tsv`, `test_matched.tsv`, `test_mismatched.tsv`;
  AX: `diagnostic.tsv`), tab-separated, `\\n` line ends, no quoting. MRPC's `train.tsv`
  and `dev.tsv` start with a UTF-8 byte-order mark as the real ones do; CoLA's `train.tsv`
  and `dev.tsv` have no header line. MRPC has the real split sizes (3,668 / 408 / 1,725
  rows) so that the tests' step counts (`--num_train_epochs=0.02` is 4 steps of 16) are
  the same as on the real data; the other tasks are small.
- SQuAD: `train-v1.1-subset.json`, `dev-v1.1.json` (three answers per question, as in
  the real dev set) and `dev-v2.0.json` (about a quarter of the questions unanswerable, each
  with `plausible_answers`), serialised as the official files are (`json.dumps` defaults,
  official key order). Every `answer_start` points at its answer text. Contexts are
  long enough (about 150 WordPiece tokens) to need several windows at short
  `max_seq_length`, and some names carry accents, so that character offsets are tested.

The WordPiece vocabulary of tokenizer-level tests is not written here: it is the
embedded backbone's `vocab.txt` (`tests.conftest.BERT_VOCAB`), the uncased vocabulary
of Google's BERT.
"""

import json
import random
from pathlib import Path
from typing import Dict, List, Optional

# Row counts of the written GLUE splits: {task folder: {split: rows}}.
GLUE_ROWS = {
    "MRPC": {"train": 3668, "dev": 408, "test": 1725},
    "CoLA": {"train": 96, "dev": 48, "test": 24},
    "SST-2": {"train": 96, "dev": 48, "test": 24},
    "STS-B": {"train": 64, "dev": 32, "test": 16},
    "QQP": {"train": 64, "dev": 32, "test": 16},
    "MNLI": {"train": 64, "dev_matched": 24, "dev_mismatched": 24,
             "test_matched": 12, "test_mismatched": 12},
    "QNLI": {"train": 64, "dev": 32, "test": 16},
    "RTE": {"train": 64, "dev": 32, "test": 16},
    "WNLI": {"train": 48, "dev": 24, "test": 12},
    "diagnostic": {"diagnostic": 12},
}

# Questions in the written SQuAD files.
SQUAD_SHAPES = {  # file: (articles, paragraphs per article)
    "train-v1.1-subset.json": (12, 5),
    "dev-v1.1.json": (4, 4),
    "dev-v2.0.json": (4, 4),
}

# ------------------------------------------------------------------ English parts

_SPEAKERS = [
    "The company 's chief executive", "A spokesman for the ministry", "The city council",
    "Senator Maria Lopez", "The union 's president", "Police officials",
    "The state attorney general", "Analysts at the bank", "The museum 's director",
    "Federal regulators", "The hospital 's medical director", "Airline officials",
    "The school board", "Prime Minister John Howard", "The team 's coach",
    "Investigators", "The software maker", "Local residents", "The central bank",
    "A lawyer for the family",
]
_SAYS = [("said", "stated"), ("announced", "disclosed"), ("told reporters", "said"),
         ("confirmed", "acknowledged"), ("warned", "cautioned"), ("reported", "said")]
_WHEN = [("on Tuesday", "Tuesday"), ("last week", "a week ago"),
         ("in a statement on Friday", "on Friday"), ("late on Monday", "on Monday night"),
         ("earlier this month", "this month"), ("on Thursday", "Thursday"),
         ("yesterday", "on Wednesday"), ("at a news conference", "at a briefing")]
# (claim, paraphrase of the claim); {n} is a number, {m} a month.
_CLAIMS = [
    ("profits rose {n} percent in the third quarter",
     "third-quarter earnings were up {n} percent"),
    ("the new bridge would open to traffic in {m}",
     "traffic would start using the new bridge in {m}"),
    ("talks with the striking workers had broken down",
     "negotiations with the workers on strike had collapsed"),
    ("{n} people were treated for minor injuries",
     "minor injuries were treated in {n} people"),
    ("the plant would cut about {n} jobs by {m}",
     "roughly {n} positions at the plant would go by {m}"),
    ("the company had agreed to buy its rival for ${n} million",
     "it would acquire its competitor in a ${n} million deal"),
    ("the suspect had been released on bail",
     "the man arrested had been freed on bail"),
    ("sales of the device had doubled since {m}",
     "the device had sold twice as many units since {m}"),
    ("the flight was delayed by {n} minutes because of fog",
     "fog held the flight up for {n} minutes"),
    ("the law would take effect in {m}",
     "the legislation would come into force in {m}"),
    ("the shares fell {n} cents in early trading",
     "the stock dropped {n} cents soon after the market opened"),
    ("the virus had infected about {n} computers worldwide",
     "some {n} machines around the world had been hit by the virus"),
    ("the school would close for the rest of the week",
     "classes at the school were cancelled until next week"),
    ("the river had risen {n} feet overnight",
     "the water level of the river climbed {n} feet during the night"),
    ("the contract was worth about ${n} million",
     "the deal was valued at roughly ${n} million"),
    ("the new rules would apply to all banks from {m}",
     "every bank would have to follow the new rules starting in {m}"),
]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]

_GOOD = ["charming", "moving", "funny", "beautifully acted", "smart", "touching",
         "gripping", "warm-hearted", "clever", "delightful"]
_BAD = ["dull", "clumsy", "tedious", "predictable", "lifeless", "overlong", "shallow",
        "confused", "forgettable", "painfully slow"]
_FILM = ["film", "comedy", "thriller", "drama", "documentary", "story", "picture",
         "romance", "sequel", "adaptation"]
_FILM_TAIL = ["with a terrific cast", "that never finds its footing",
              "about growing up in a small town", "from a first-time director",
              "that runs out of ideas halfway", "full of small surprises",
              "about a family coming apart", "set in the 1970s"]

_SUBJECTS = ["The teacher", "My brother", "The dog", "Sarah", "The children", "Bill",
             "The committee", "Our neighbours", "The old man", "Mary"]
_VERB_OBJECT = [("gave", "the book to Anna"), ("put", "the keys on the table"),
                ("sent", "a letter to the mayor"), ("found", "the ring under the sofa"),
                ("told", "the story to everyone"), ("left", "the door open"),
                ("bought", "a new car yesterday"), ("read", "the report twice")]

_CITIES = [("Lyon", "France"), ("Kraków", "Poland"), ("Malmö", "Sweden"),
           ("Porto", "Portugal"), ("Osaka", "Japan"), ("Curitiba", "Brazil"),
           ("Leeds", "England"), ("Graz", "Austria"), ("Tampere", "Finland"),
           ("Córdoba", "Spain")]
_EVENTS = ["a trade summit", "the world cycling championships", "an arts festival",
           "a climate conference", "the national book fair", "a chess olympiad"]


def _tsv(*fields) -> str:
    return "\t".join(str(f) for f in fields)


def _write_lines(path: Path, lines: List[str], bom: bool = False) -> Path:
    """Writes `lines` with `\\n` ends (and a UTF-8 byte-order mark if `bom`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    path.write_bytes((("\ufeff" if bom else "") + text).encode("utf-8"))
    return path


# ------------------------------------------------------------------ sentence pairs

def news_pair(rng: random.Random, paraphrase: bool):
    """Two news sentences in MRPC's tokenized style (` , ` and ` .` split off).

    A paraphrase says the same thing in other words; otherwise the second sentence
    changes the claim (another claim, or another number)."""
    who = rng.choice(_SPEAKERS)
    says, says2 = rng.choice(_SAYS)
    when, when2 = rng.choice(_WHEN)
    claim, claim2 = rng.choice(_CLAIMS)
    values = {"n": rng.randint(2, 950), "m": rng.choice(_MONTHS)}
    first = f"{who} {says} {when} that {claim.format(**values)} ."
    if paraphrase:
        second = f"{when2[0].upper() + when2[1:]} , {who[0].lower() + who[1:]} {says2} " \
                 f"{claim2.format(**values)} ."
        if who.split()[0] not in ("The", "A"):  # a name keeps its capital
            second = f"{who} {says2} {when2} that {claim2.format(**values)} ."
    elif rng.random() < 0.5:
        other, other2 = rng.choice([c for c in _CLAIMS if c[0] != claim])
        second = f"{who} {says2} {when2} that {other2.format(**values)} ."
    else:
        changed = dict(values, n=values["n"] + rng.randint(3, 40), m=rng.choice(
            [m for m in _MONTHS if m != values["m"]]))
        second = f"{who} {says2} {when2} that {claim2.format(**changed)} , " \
                 f"not {claim.format(**values).split()[-1]} as first thought ."
    return first, second


def review(rng: random.Random, positive: bool) -> str:
    """A lower-cased, tokenized movie-review phrase (SST-2's style, with its trailing space)."""
    adjective = rng.choice(_GOOD if positive else _BAD)
    article = "an" if adjective[0] in "aeiou" else "a"
    return f"it 's {article} {adjective} {rng.choice(_FILM)} {rng.choice(_FILM_TAIL)} . "


def simple_sentence(rng: random.Random, acceptable: bool) -> str:
    """A short sentence; an unacceptable one has its words in a wrong order (CoLA)."""
    subject = rng.choice(_SUBJECTS)
    verb, obj = rng.choice(_VERB_OBJECT)
    if acceptable:
        return f"{subject} {verb} {obj}."
    words = obj.split()
    return f"{subject} {' '.join(words[1:])} {verb} {words[0]}."


def inference_pair(rng: random.Random, label: str):
    """A premise and a hypothesis that it entails, contradicts or leaves open."""
    city, country = rng.choice(_CITIES)
    event = rng.choice(_EVENTS)
    year = rng.randint(1961, 2019)
    premise = f"{city}, the second city of {country}, hosted {event} in {year}, " \
              f"drawing visitors from more than {rng.randint(12, 90)} countries."
    if label == "entailment":
        hypothesis = f"{event[0].upper() + event[1:]} took place in {city}."
    elif label == "contradiction":
        hypothesis = f"{city} has never hosted {event}."
    else:
        hypothesis = f"{city} will host {event} again in {year + rng.randint(4, 12)}."
    return premise, hypothesis


def pronoun_pair(rng: random.Random, label: str):
    """A Winograd-style sentence and a reading of its pronoun (WNLI: "1" if right)."""
    big, small = rng.choice([("trophy", "suitcase"), ("sofa", "doorway"), ("box", "cupboard"),
                             ("piano", "lift"), ("table", "van")])
    sentence = f"The {big} does not fit into the {small} because it is too large."
    guess = big if label == "1" else small
    return sentence, f"The {guess} is too large."


# ------------------------------------------------------------------ GLUE writers

def _balanced(rng: random.Random, count: int, labels, weights=None) -> List[str]:
    return [rng.choices(labels, weights)[0] for _ in range(count)]


def write_mrpc(folder: Path, rows: Optional[Dict[str, int]] = None, seed: int = 0) -> Path:
    """MRPC as download_glue_data.py writes it: `Quality #1 ID #2 ID #1 String #2 String`,
    a BOM before train's and dev's header, test with `index` in place of `Quality`.
    About two thirds of the pairs are paraphrases, as in the real corpus."""
    rows = rows or GLUE_ROWS["MRPC"]
    rng = random.Random(f"mrpc{seed}")
    header = _tsv("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
    next_id = 1000000
    for split in ("train", "dev", "test"):
        lines = [header if split != "test" else header.replace("Quality", "index", 1)]
        for i in range(rows[split]):
            label = rng.choices("10", (2, 1))[0]
            a, b = news_pair(rng, label == "1")
            next_id += rng.randint(3, 400)
            lines.append(_tsv(label if split != "test" else i, next_id, next_id + 7, a, b))
        _write_lines(folder / f"{split}.tsv", lines, bom=split != "test")
    return folder


def write_cola(folder: Path, rows=None, seed: int = 0) -> Path:
    """CoLA: headerless train/dev `source label original-mark sentence`; test `index sentence`."""
    rows = rows or GLUE_ROWS["CoLA"]
    rng = random.Random(f"cola{seed}")
    for split in ("train", "dev"):
        lines = []
        for label in _balanced(rng, rows[split], "10", (7, 3)):
            lines.append(_tsv(rng.choice(["gj04", "bc01", "ks08", "r-67"]), label,
                              "" if label == "1" else "*", simple_sentence(rng, label == "1")))
        _write_lines(folder / f"{split}.tsv", lines)
    _write_lines(folder / "test.tsv", [_tsv("index", "sentence")] + [
        _tsv(i, simple_sentence(rng, rng.random() < 0.7)) for i in range(rows["test"])])
    return folder


def write_sst2(folder: Path, rows=None, seed: int = 0) -> Path:
    """SST-2: `sentence label` with a header; test `index sentence`."""
    rows = rows or GLUE_ROWS["SST-2"]
    rng = random.Random(f"sst{seed}")
    for split in ("train", "dev"):
        _write_lines(folder / f"{split}.tsv", [_tsv("sentence", "label")] + [
            _tsv(review(rng, label == "1"), label) for label in _balanced(rng, rows[split], "01")])
    _write_lines(folder / "test.tsv", [_tsv("index", "sentence")] + [
        _tsv(i, review(rng, rng.random() < 0.5)) for i in range(rows["test"])])
    return folder


def write_stsb(folder: Path, rows=None, seed: int = 0) -> Path:
    """STS-B: ten columns (sentences in 7 and 8, the 0-5 score in 9); test without score."""
    rows = rows or GLUE_ROWS["STS-B"]
    rng = random.Random(f"stsb{seed}")
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"]
    for split in ("train", "dev", "test"):
        lines = [_tsv(*(header if split != "test" else header[:-1]))]
        for i in range(rows[split]):
            same = rng.random() < 0.5
            a, b = news_pair(rng, same)
            score = f"{rng.uniform(3.2, 5.0) if same else rng.uniform(0.0, 2.8):.3f}"
            fields = [i, "main-news", "headlines", "2015", f"{i:04d}", "none", "none", a, b]
            lines.append(_tsv(*(fields + [score] if split != "test" else fields)))
        _write_lines(folder / f"{split}.tsv", lines)
    return folder


def write_qqp(folder: Path, rows=None, seed: int = 0) -> Path:
    """QQP: `id qid1 qid2 question1 question2 is_duplicate`; test `id question1 question2`."""
    rows = rows or GLUE_ROWS["QQP"]
    rng = random.Random(f"qqp{seed}")
    topics = [("learn to play the guitar", "get better at playing guitar"),
              ("lose weight quickly", "drop weight fast"),
              ("prepare for a job interview", "get ready for an interview"),
              ("improve my English", "get better at English"),
              ("start a small business", "open my own small company")]
    for split in ("train", "dev", "test"):
        header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
        lines = [_tsv(*(header if split != "test" else ["id", "question1", "question2"]))]
        for i in range(rows[split]):
            duplicate = rng.random() < 0.4
            first, second = rng.choice(topics)
            other = second if duplicate else rng.choice([t for t in topics if t[0] != first])[1]
            q1, q2 = f"How can I {first}?", f"What is the best way to {other}?"
            lines.append(_tsv(i, 2 * i + 1, 2 * i + 2, q1, q2, int(duplicate)) if split != "test"
                         else _tsv(i, q1, q2))
        _write_lines(folder / f"{split}.tsv", lines)
    return folder


def write_mnli(folder: Path, rows=None, seed: int = 0) -> Path:
    """MNLI: train 12 columns, dev_matched/dev_mismatched 16 (five annotators, gold last),
    test_matched/test_mismatched 10."""
    rows = rows or GLUE_ROWS["MNLI"]
    rng = random.Random(f"mnli{seed}")
    head = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
            "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
            "sentence2"]
    for name, count in rows.items():
        extra = {"train": ["label1", "gold_label"], "test": []}.get(
            name.split("_")[0], ["label1", "label2", "label3", "label4", "label5", "gold_label"])
        lines = [_tsv(*head, *extra)]
        for i in range(count):
            label = rng.choice(["entailment", "neutral", "contradiction"])
            p, h = inference_pair(rng, label)
            fields = [i, 1000 + i, f"{1000 + i}e", "travel", f"( {p} )", f"( {h} )",
                      f"(ROOT {p})", f"(ROOT {h})", p, h]
            lines.append(_tsv(*fields, *([label] * len(extra))))
        _write_lines(folder / f"{name}.tsv", lines)
    return folder


def write_nli_pairs(folder: Path, task: str, rows=None, seed: int = 0) -> Path:
    """QNLI, RTE or WNLI: `index sentence1 sentence2 label` with a header; test without label."""
    rows = rows or GLUE_ROWS[task]
    rng = random.Random(f"{task}{seed}")
    labels = ["0", "1"] if task == "WNLI" else ["entailment", "not_entailment"]
    names = {"QNLI": ("question", "sentence")}.get(task, ("sentence1", "sentence2"))
    for split in ("train", "dev", "test"):
        lines = [_tsv("index", *names, *(["label"] if split != "test" else []))]
        for i in range(rows[split]):
            label = rng.choice(labels)
            if task == "WNLI":
                a, b = pronoun_pair(rng, label)
            elif task == "QNLI":
                p, _ = inference_pair(rng, "entailment")
                city = p.split(",")[0]
                a = f"Which event did {city} host?"
                b = p if label == "entailment" else f"{city} is known for its old bridges."
            else:
                a, b = inference_pair(rng, "entailment" if label == "entailment"
                                      else rng.choice(["neutral", "contradiction"]))
            lines.append(_tsv(i, a, b, *([label] if split != "test" else [])))
        _write_lines(folder / f"{split}.tsv", lines)
    return folder


def write_diagnostic(folder: Path, rows=None, seed: int = 0) -> Path:
    """AX: `diagnostic.tsv` with `index sentence1 sentence2`."""
    rows = rows or GLUE_ROWS["diagnostic"]
    rng = random.Random(f"ax{seed}")
    lines = [_tsv("index", "sentence1", "sentence2")]
    for i in range(rows["diagnostic"]):
        p, h = inference_pair(rng, rng.choice(["entailment", "neutral", "contradiction"]))
        lines.append(_tsv(i, p, h))
    _write_lines(folder / "diagnostic.tsv", lines)
    return folder


GLUE_WRITERS = {
    "MRPC": write_mrpc, "CoLA": write_cola, "SST-2": write_sst2, "STS-B": write_stsb,
    "QQP": write_qqp, "MNLI": write_mnli, "diagnostic": write_diagnostic,
    "QNLI": lambda f, rows=None, seed=0: write_nli_pairs(f, "QNLI", rows, seed),
    "RTE": lambda f, rows=None, seed=0: write_nli_pairs(f, "RTE", rows, seed),
    "WNLI": lambda f, rows=None, seed=0: write_nli_pairs(f, "WNLI", rows, seed),
}


def write_glue(root: Path) -> Path:
    """A glue_data folder (`root/<TASK>/...`) holding every GLUE task's layout."""
    for task, writer in GLUE_WRITERS.items():
        writer(root / task)
    return root


def mrpc_lines(rows=(97, 41, 9), seed: int = 0):
    """The first lines (header included) of written MRPC train, dev and test files, as
    text lines without the BOM: (train lines, dev lines, test lines)."""
    rng = random.Random(f"mrpc-lines{seed}")
    header = _tsv("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
    out = []
    for split, count in zip(("train", "dev", "test"), rows):
        lines = [header if split != "test" else header.replace("Quality", "index", 1)]
        for i in range(count - 1):
            label = rng.choices("10", (2, 1))[0]
            a, b = news_pair(rng, label == "1")
            lines.append(_tsv(label if split != "test" else i, 3000 + 2 * i, 3001 + 2 * i, a, b))
        out.append(lines)
    return tuple(out)


# ------------------------------------------------------------------ SQuAD

_FIRST = ["Thomas", "Margaret", "José", "Ingrid", "Samuel", "Zoë", "Henrik", "Amelia",
          "François", "Dorothy", "Kenji", "Eleanor"]
_LAST = ["Hale", "Whitcombe", "Álvarez", "Lindqvist", "Carver", "Brennan", "Østergaard",
         "Pemberton", "Dubois", "Fairfax", "Takahashi", "Ashworth"]
_TOWNS = ["Ashford", "Bramley", "Kelby", "Dunmore", "Hollins", "Marlow", "Penrith",
          "Stowe", "Wickham", "Thornbury", "Eastleigh", "Ravensworth", "Linton", "Coldstream"]
_RIVERS = ["Avon", "Derwent", "Tamar", "Wensum", "Kennet", "Lune", "Teme", "Wharfe"]
_COUNTIES = ["Somerset", "Cumbria", "Norfolk", "Devon", "Shropshire", "Northumberland"]
_KINGS = ["Henry II", "Edward I", "John", "Richard II", "Edward III", "Henry VI"]
_PRODUCTS = [("woollen cloth", "wool"), ("farm machinery", "machinery"),
             ("glass bottles", "bottles"), ("paper", "paper"), ("bicycles", "bicycles"),
             ("pottery", "pottery")]
_FIELDS = ["chemistry", "astronomy", "botany", "geology", "mathematics", "physiology"]
_UNIS = ["Edinburgh", "Uppsala", "Leiden", "Bologna", "Göttingen", "Montpellier"]
_THINGS = ["a new kind of lamp", "a method for dating rocks", "a catalogue of comets",
           "a theory of plant growth", "a calculating machine", "a test for lead in water"]


def _town_paragraph(rng: random.Random):
    town, river, county = rng.choice(_TOWNS), rng.choice(_RIVERS), rng.choice(_COUNTIES)
    founder = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    king = rng.choice(_KINGS)
    founded = rng.randint(1050, 1190)
    charter = founded + rng.randint(20, 90)
    population = f"{rng.randint(4000, 60000):,}"
    census = rng.choice(["2001", "2011"])
    product, short = rng.choice(_PRODUCTS)
    employer = f"{rng.choice(_LAST)} & Sons"
    staff = rng.randint(150, 2400)
    month = rng.choice(_MONTHS)
    sentences = [
        f"{town} is a market town in the county of {county}, on the banks of the River "
        f"{river}.",
        f"It had a population of {population} at the {census} census.",
        f"The town grew around an abbey founded in {founded} by the knight {founder}, and "
        f"its charter was granted by King {king} in {charter}.",
        f"For six centuries the town's fortune rested on {product}, which was carried down "
        f"the {river} to the coast on flat-bottomed barges.",
        f"Its largest employer today is {employer}, which still makes {short} and employs "
        f"about {staff} people.",
        f"The {town} Fair, first held in {charter + 1}, takes place every {month} and draws "
        f"visitors from across {county}.",
    ]
    questions = [
        (f"On which river does {town} stand?", 0, f"River {river}", [f"{river}"]),
        (f"What was the population of {town} at the {census} census?", 1, population, []),
        (f"In what year was the abbey at {town} founded?", 2, str(founded), []),
        (f"Who founded the abbey at {town}?", 2, f"the knight {founder}", [founder]),
        (f"Which king granted {town} its charter?", 2, f"King {king}", [king]),
        ("What was carried down the river to the coast?", 3, product, []),
        (f"How many people does {employer} employ?", 4, f"about {staff}", [str(staff)]),
        (f"When is the {town} Fair held?", 5, f"every {month}", [month]),
    ]
    impossible = [
        (f"What was the population of {town} in 1801?", 1, population),
        (f"Which queen granted {town} its charter?", 2, f"King {king}"),
        (f"How many people did {employer} employ in 1900?", 4, f"about {staff}"),
    ]
    return f"{town}", sentences, questions, impossible


def _scientist_paragraph(rng: random.Random):
    name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    surname = name.split()[-1]
    born = rng.randint(1720, 1890)
    town = rng.choice(_TOWNS)
    uni = rng.choice(_UNIS)
    field = rng.choice(_FIELDS)
    thing = rng.choice(_THINGS)
    year = born + rng.randint(28, 45)
    died = year + rng.randint(10, 40)
    pupils = rng.randint(12, 80)
    sentences = [
        f"{name} (born {born} in {town}; died {died}) was a scholar of {field} who spent "
        f"most of a long career at the University of {uni}.",
        f"As a young man {surname} worked as an apprentice to an apothecary, and only "
        f"began to study at the age of twenty-two.",
        f"In {year} {surname} published an account of {thing}, the work for which "
        f"{surname} is best remembered.",
        f"The account was translated into French and German within ten years, and it was "
        f"taught at {uni} until the end of the century.",
        f"{surname} trained more than {pupils} students, several of whom became professors "
        f"of {field} themselves.",
    ]
    questions = [
        (f"Where was {name} born?", 0, town, []),
        (f"At which university did {surname} spend most of a long career?", 0,
         f"University of {uni}", [uni]),
        (f"What did {surname} work as before studying?", 1, "an apprentice to an apothecary",
         ["apprentice to an apothecary"]),
        (f"In what year did {surname} publish the best remembered work?", 2, str(year), []),
        (f"What was {surname}'s best remembered work about?", 2, thing, []),
        ("Into which languages was the account translated?", 3, "French and German", []),
        (f"How many students did {surname} train?", 4, f"more than {pupils}", [str(pupils)]),
    ]
    impossible = [
        (f"In what year did {surname} marry?", 2, str(year)),
        ("Into which language was the account first printed?", 3, "French and German"),
        (f"How many students did {surname} fail?", 4, f"more than {pupils}"),
    ]
    return name, sentences, questions, impossible


def _qid(rng: random.Random) -> str:
    return f"{rng.getrandbits(96):024x}"


def squad_dataset(version: str, articles: int, paragraphs: int, seed: int = 0,
                  dev: bool = False) -> dict:
    """A SQuAD dataset as a dict, in the official layout of `version` ("1.1" or "2.0").

    Each article is a run of paragraphs about towns or scholars. A v1.1 training file has
    one answer per question; a dev file (`dev=True`) three, as the real dev sets (the
    answer, the same answer again, and where there is one a shorter answer inside it).
    A v2.0 file adds unanswerable questions, each with a `plausible_answers` span, and
    marks every question with `is_impossible`; key order follows the official v2.0 file.
    """
    rng = random.Random(f"squad{version}{seed}{dev}")
    data = []
    for a in range(articles):
        maker = _town_paragraph if a % 2 == 0 else _scientist_paragraph
        paras, title = [], None
        for _ in range(paragraphs):
            subject, sentences, questions, impossible = maker(rng)
            title = title or subject.replace(" ", "_")
            context = " ".join(sentences)
            starts = [context.index(s) for s in sentences]

            def span(sentence_index, text):
                return starts[sentence_index] + sentences[sentence_index].index(text)

            qas = []
            for question, where, text, shorter in questions:
                start = span(where, text)
                answers = [{"text": text, "answer_start": start}]
                if dev:
                    answers.append(dict(answers[0]))
                    short = shorter[0] if shorter else text
                    answers.append({"text": short, "answer_start": start + text.index(short)})
                if version == "2.0":
                    qas.append({"question": question, "id": _qid(rng),
                                "answers": answers, "is_impossible": False})
                elif dev:
                    qas.append({"answers": answers, "question": question, "id": _qid(rng)})
                else:
                    qas.append({"answers": [{"answer_start": start, "text": text}],
                                "question": question, "id": _qid(rng)})
            if version == "2.0":
                for question, where, text in impossible[:rng.randint(2, 3)]:
                    qas.insert(rng.randint(0, len(qas)), {
                        "plausible_answers": [{"text": text, "answer_start": span(where, text)}],
                        "question": question, "id": _qid(rng), "answers": [],
                        "is_impossible": True})
                paras.append({"qas": qas, "context": context})
            else:
                paras.append({"context": context, "qas": qas})
        data.append({"title": title, "paragraphs": paras})
    if version == "2.0":
        return {"version": "v2.0", "data": data}
    return {"data": data, "version": "1.1"}


def write_squad(root: Path) -> Path:
    """`root/` holding train-v1.1-subset.json, dev-v1.1.json and dev-v2.0.json, serialised
    as the official files are (`json.dumps` defaults, no trailing newline)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, (articles, paragraphs) in SQUAD_SHAPES.items():
        version = "2.0" if "v2.0" in name else "1.1"
        data = squad_dataset(version, articles, paragraphs, dev=name.startswith("dev"))
        (root / name).write_text(json.dumps(data), encoding="utf-8")
    return root


def squad_slice(paragraphs: int = 2) -> dict:
    """The first `paragraphs` paragraphs of the written dev-v1.1.json's first article."""
    data = squad_dataset("1.1", *SQUAD_SHAPES["dev-v1.1.json"], dev=True)
    article = data["data"][0]
    return {"version": "1.1",
            "data": [dict(article, paragraphs=article["paragraphs"][:paragraphs])]}


def write_data_dir(root: Path) -> Path:
    """A data folder laid out as the `realdata` group expects one (`glue/<TASK>/...`,
    `squad/...`), holding only written files."""
    write_glue(root / "glue")
    write_squad(root / "squad")
    return root
