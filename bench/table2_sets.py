"""The sets of the paper's Table 2 and their splits (bench/table2.py runs the cells).

The split (the paper's is not published): rows are grouped by label and each group's order
shuffled with NumPy's RandomState(SPLIT_SEED); where the set has no test (or dev) part of
its own, the first 10% (rounded) of each group of its training rows are test, the next 10%
dev. Each part is then capped (CAPS), a stratified sample keeping every label the part
has, the rest by largest remainder, and written as `text,label` CSV files; `split_digest`
fixes which split a run saw. `max_seq_length` per set: the 95th percentile of the training
texts' wordpiece lengths, rounded up to a multiple of 32 within LENGTH_RANGE.
"""

import collections
import csv
import dataclasses
import hashlib
import math
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from bench.harness import REPO

SHARED = os.path.join(REPO, "..", "shared", "data")
SETS_DIR = os.path.join(SHARED, "table2")
AIRLINE = os.path.join(SHARED, "classification", "airline", "Tweets.csv")
SPLIT_SEED = 20190201
PARTS = ("train", "dev", "test")
CAPS = {"train": 1000, "dev": 500, "test": 1500}
LENGTH_RANGE = (64, 128)
# The sets' own splits (the shared folder's README), as 0-based half-open row ranges.
OWN_SPLITS = {
    "20newsgroups": {"train": (0, 11314), "test": (11314, 18846)},
    "customer_complaint_database": {"train": (0, 10000), "test": (10000, 13000)},
    "news_aggregator": {"train": (0, 10684), "dev": (10684, 12020), "test": (12020, 13356)},
}


@dataclasses.dataclass(frozen=True)
class DataSet:
    """A CSV file of one set and the columns that hold its text and label."""
    name: str
    path: str
    text_column: str = "text"
    label_column: str = "label"


def find_sets(sets_dir: Optional[str], airline: Optional[str]) -> List[DataSet]:
    """Every `<set>/data.csv` under `sets_dir`, and the airline tweets when given."""
    found = []
    if sets_dir:
        for name in sorted(os.listdir(sets_dir)):
            path = os.path.join(sets_dir, name, "data.csv")
            if os.path.isfile(path):
                found.append(DataSet(name, path))
    if airline:
        found.append(DataSet("crowdflower_airline", airline, "text", "airline_sentiment"))
    return found


def read_set(data: DataSet):
    """(texts, labels, own) of a set; `own` names each row's own split, or is None."""
    csv.field_size_limit(sys.maxsize)
    with open(data.path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    texts = [row[data.text_column] for row in rows]
    labels = [row[data.label_column] for row in rows]
    own = None
    if rows and "split" in rows[0]:
        own = [row["split"] for row in rows]
    elif data.name in OWN_SPLITS:
        own = ["train"] * len(rows)
        for part, (start, stop) in OWN_SPLITS[data.name].items():
            own[start:stop] = [part] * (stop - start)
    return texts, labels, own


def stratified_cap(indices: Sequence[int], labels: Sequence[str], cap: Optional[int],
                   generator: np.random.RandomState) -> List[int]:
    """At most `cap` of `indices`, stratified by label: every label keeps one row, the
    rest is shared in proportion to the labels' counts by largest remainder."""
    if cap is None or len(indices) <= cap:
        return list(indices)
    groups = collections.defaultdict(list)
    for i in indices:
        groups[labels[i]].append(i)
    names = sorted(groups)
    if cap < len(names):
        raise ValueError(f"a cap of {cap} rows cannot keep each of {len(names)} labels")
    spare, pool = cap - len(names), len(indices) - len(names)
    shares = {name: spare * (len(groups[name]) - 1) / pool for name in names}
    quota = {name: 1 + math.floor(shares[name]) for name in names}
    left = cap - sum(quota.values())
    for name in sorted(names, key=lambda n: (math.floor(shares[n]) - shares[n], n))[:left]:
        quota[name] += 1
    return [i for name in names
            for i in generator.permutation(groups[name])[:quota[name]].tolist()]


def split_rows(labels: Sequence[str], own: Optional[Sequence[str]] = None,
               caps: Optional[Dict[str, int]] = None,
               seed: int = SPLIT_SEED) -> Dict[str, List[int]]:
    """The documented split: {part: sorted row indices} (see the module doc)."""
    caps = CAPS if caps is None else caps
    generator = np.random.RandomState(seed)
    own = own or ["train"] * len(labels)
    pools = {part: [i for i, name in enumerate(own) if name == part] for part in PARTS}
    carved = [part for part in ("test", "dev") if not pools[part]]
    if carved:
        groups = collections.defaultdict(list)
        for i in pools["train"]:
            groups[labels[i]].append(i)
        pools["train"] = []
        for label in sorted(groups):
            order = generator.permutation(groups[label]).tolist()
            tenth = int(0.1 * len(order) + 0.5)
            for n, part in enumerate(carved):
                pools[part] += order[n * tenth:(n + 1) * tenth]
            pools["train"] += order[len(carved) * tenth:]
    return {part: sorted(stratified_cap(pools[part], labels, caps.get(part), generator))
            for part in PARTS}


def sequence_length(lengths: Sequence[int], bounds=LENGTH_RANGE) -> int:
    """The 95th percentile of `lengths`, rounded up to a multiple of 32, within `bounds`."""
    p95 = float(np.percentile(np.asarray(lengths), 95)) if len(lengths) else 0.0
    return int(min(bounds[1], max(bounds[0], 32 * math.ceil(p95 / 32))))


def wordpiece_lengths(texts: Sequence[str]) -> List[int]:
    """Each text's length in the embedded backbone's wordpieces, [CLS] and [SEP] included."""
    from adapter_bert.data.tokenization import load_tokenizer
    from adapter_bert.model.checkpoints import default_backbone_dir
    tokenizer = load_tokenizer(os.path.join(default_backbone_dir(), "vocab.txt"))
    return [len(e.ids) for e in tokenizer.backend_tokenizer.encode_batch(list(texts))]


def write_split(data: DataSet, work_dir: str, caps=None) -> dict:
    """Writes the set's train/dev/test.csv into `work_dir`; returns what every record of
    the set carries (the split's digest, its sizes and the set's max_seq_length)."""
    texts, labels, own = read_set(data)
    parts = split_rows(labels, own, caps)
    os.makedirs(work_dir, exist_ok=True)
    for part, indices in parts.items():
        with open(os.path.join(work_dir, f"{part}.csv"), "w", encoding="utf-8",
                  newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows((texts[i], labels[i]) for i in indices)
    test_labels = collections.Counter(labels[i] for i in parts["test"])
    return {"split_digest": split_digest(work_dir),
            "rows": {part: len(indices) for part, indices in parts.items()},
            "labels": len(set(labels)),
            "majority_test_accuracy": 100 * max(test_labels.values()) / len(parts["test"]),
            "max_seq_length": sequence_length(
                wordpiece_lengths([texts[i] for i in parts["train"]]))}


def split_digest(work_dir: str) -> str:
    """The digest of the split files in `work_dir`, as `write_split` computes it."""
    digest = hashlib.sha256()
    for part in PARTS:
        with open(os.path.join(work_dir, f"{part}.csv"), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()
