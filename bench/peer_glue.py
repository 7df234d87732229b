"""One GLUE run of what a PyTorch user would otherwise run on the same MiniLM: AdapterHub's
Houlsby adapters or `transformers` full fine-tuning. Prints one JSON line.

Run by bench.glue_peers with a Python that has PyTorch, transformers 4.57 and `adapters`
1.3 (not this package, not TensorFlow). The settings are those of the peer figures the
GLUE table has always cited: batch 32, max_seq_length 128 (longest-first truncation),
every batch padded to its longest sequence, AdamW (epsilon 1e-6, weight decay 0.01 on
every weight but biases and LayerNorms, as `transformers`' Trainer does), 10% linear
warmup then linear decay to 0, gradient norm clipped at 1.0, float32.

- --system=adapterhub: Houlsby adapters ("double_seq_bn", bottleneck 64 on hidden 384,
  gelu), every LayerNorm and the classifier head trained. `train_adapter` puts the
  encoder in training mode and leaves the classification head as `from_pretrained` left
  it, in eval mode, so the head's dropout is off, as in a plain AdapterHub loop.
- --system=full: every weight trained, the whole model in training mode.

The training order is a permutation per epoch drawn from a torch.Generator seeded with
--seed, which also seeds torch (adapter and head initialisation, dropout).

Usage (the peer's Python):
    python bench/peer_glue.py --system=adapterhub --task=cola --data_dir=<glue>/CoLA \
        --model_dir=<MiniLM> --learning_rate=1e-3 --seed=42
"""

import argparse
import csv
import json
import math
import os
import sys
import time

# Per task: train/dev file reading (has header, text columns, label column) and labels.
TASKS = {
    "cola": {"header": False, "text": (3,), "label": 1, "labels": ("0", "1"), "metric": "mcc"},
    "sst-2": {"header": True, "text": (0,), "label": 1, "labels": ("0", "1"), "metric": "accuracy"},
    "mrpc": {"header": True, "text": (3, 4), "label": 0, "labels": ("0", "1"), "metric": "f1"},
    "rte": {"header": True, "text": (1, 2), "label": 3,
            "labels": ("entailment", "not_entailment"), "metric": "accuracy"},
    # bench/airline.py's split: train/dev/test.csv with the columns text, label.
    "airline": {"header": True, "text": (0,), "label": 1, "format": "csv",
                "labels": ("negative", "neutral", "positive"), "metric": "accuracy"},
    # bench/table2.py's splits: the same columns, the labels those of train.csv (sorted).
    "table2": {"header": True, "text": (0,), "label": 1, "format": "csv", "labels": None,
               "metric": "accuracy"},
}


def read_rows(data_dir: str, split: str, task: dict):
    """The rows of a split's file (header left out), read as BERT's scripts read them."""
    kind = task.get("format", "tsv")
    path = os.path.join(data_dir, f"{split}.{kind}")
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle) if kind == "csv"
                    else csv.reader(handle, delimiter="\t", quotechar=None))
    return rows[1:] if task["header"] else rows


def label_names(data_dir: str, task: dict):
    """The task's labels: fixed, or those of its train file in sorted order."""
    return task["labels"] or tuple(sorted({row[task["label"]] for row in
                                           read_rows(data_dir, "train", task)}))


def read_split(data_dir: str, split: str, task: dict):
    """(texts, label ids) of a split's file."""
    rows, names = read_rows(data_dir, split, task), label_names(data_dir, task)
    texts = [tuple(row[i] for i in task["text"]) for row in rows]
    return texts, [names.index(row[task["label"]]) for row in rows]


def encode(tokenizer, texts, max_length: int):
    """Token ids per example, unpadded (batches pad to their own longest)."""
    columns = list(zip(*texts))
    encoded = tokenizer(*columns, truncation="longest_first", max_length=max_length)
    return [{key: encoded[key][i] for key in ("input_ids", "token_type_ids", "attention_mask")}
            for i in range(len(texts))]


def collate(examples, labels=None):
    import torch
    width = max(len(e["input_ids"]) for e in examples)
    batch = {key: torch.tensor([e[key] + [0] * (width - len(e[key])) for e in examples])
             for key in ("input_ids", "token_type_ids", "attention_mask")}
    if labels is not None:
        batch["labels"] = torch.tensor(labels)
    return batch


def build_model(system: str, model_dir: str, num_labels: int = 2):
    from transformers import BertForSequenceClassification
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=num_labels)
    if system == "full":
        model.train()
        return model
    import adapters
    adapters.init(model)
    # Bottleneck 64 on hidden 384: reduction factor 6.
    model.add_adapter("task", config=adapters.DoubleSeqBnConfig(reduction_factor=6,
                                                                non_linearity="gelu"))
    model.train_adapter("task")
    for name, parameter in model.named_parameters():
        if "LayerNorm" in name:
            parameter.requires_grad = True
    return model


def optimizer_and_schedule(model, learning_rate: float, total_steps: int):
    import torch
    from transformers import get_linear_schedule_with_warmup
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(parameter)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=learning_rate, eps=1e-6)
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * total_steps), total_steps)
    return optimizer, schedule


def scores(predictions, labels) -> dict:
    """Accuracy, F1 of class 1 and Matthews correlation, x100."""
    tp = sum(p == 1 and y == 1 for p, y in zip(predictions, labels))
    tn = sum(p == 0 and y == 0 for p, y in zip(predictions, labels))
    fp = sum(p == 1 and y == 0 for p, y in zip(predictions, labels))
    fn = sum(p == 0 and y == 1 for p, y in zip(predictions, labels))
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return {"dev_accuracy": 100.0 * (tp + tn) / len(labels),
            "dev_f1": 100.0 * 2 * tp / (2 * tp + fp + fn) if tp else 0.0,
            "dev_mcc": 100.0 * (tp * tn - fp * fn) / denominator if denominator else 0.0}


def multiclass_scores(predictions, labels, classes: int, split: str) -> dict:
    """Accuracy and macro-F1 (over all `classes`), x100, keyed by `split`."""
    f1s = []
    for c in range(classes):
        tp = sum(p == c and y == c for p, y in zip(predictions, labels))
        fp = sum(p == c and y != c for p, y in zip(predictions, labels))
        fn = sum(p != c and y == c for p, y in zip(predictions, labels))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return {f"{split}_accuracy": 100.0 * sum(p == y for p, y in zip(predictions, labels))
            / len(labels), f"{split}_macro_f1": 100.0 * sum(f1s) / classes}


def predict(model, examples) -> list:
    import torch
    model.eval()
    predictions = []
    with torch.inference_mode():
        for first in range(0, len(examples), 64):
            logits = model(**collate(examples[first:first + 64])).logits
            predictions += logits.argmax(-1).tolist()
    return predictions


def train_and_evaluate(args) -> dict:
    import torch
    from transformers import BertTokenizerFast
    task = TASKS[args.task]
    torch.manual_seed(args.seed)
    tokenizer = BertTokenizerFast.from_pretrained(args.model_dir)
    train_texts, train_labels = read_split(args.data_dir, "train", task)
    dev_texts, dev_labels = read_split(args.data_dir, "dev", task)
    train = encode(tokenizer, train_texts, args.max_seq_length)
    dev = encode(tokenizer, dev_texts, args.max_seq_length)
    model = build_model(args.system, args.model_dir,
                        len(label_names(args.data_dir, task)))
    steps_per_epoch = math.ceil(len(train) / args.batch_size)
    total_steps = steps_per_epoch * args.epochs
    optimizer, schedule = optimizer_and_schedule(model, args.learning_rate, total_steps)
    trainable = [p for p in model.parameters() if p.requires_grad]
    generator = torch.Generator().manual_seed(args.seed)
    start, epoch_losses = time.time(), []
    for _ in range(args.epochs):
        order = torch.randperm(len(train), generator=generator).tolist()
        losses = []
        for first in range(0, len(order), args.batch_size):
            chosen = order[first:first + args.batch_size]
            batch = collate([train[i] for i in chosen], [train_labels[i] for i in chosen])
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        epoch_losses.append(sum(losses) / len(losses))
    wall = time.time() - start
    if args.eval_splits:  # named splits, multi-class scores (bench/airline.py)
        result = {}
        for split in args.eval_splits.split(","):
            texts, labels = read_split(args.data_dir, split, task)
            result.update(multiclass_scores(predict(model, encode(tokenizer, texts,
                                                                  args.max_seq_length)),
                                            labels, len(label_names(args.data_dir, task)), split))
    else:
        result = scores(predict(model, dev), dev_labels)
    result.update(task=args.task, system=args.system, lr=args.learning_rate, seed=args.seed,
                  epochs=args.epochs, train_loss_per_epoch=[round(x, 4) for x in epoch_losses],
                  trainable_params=int(sum(p.numel() for p in trainable)),
                  total_params=int(sum(p.numel() for p in model.parameters())),
                  wall_s=round(wall, 1), torch=torch.__version__)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", choices=("adapterhub", "full"), required=True)
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--learning_rate", type=float, required=True)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--eval_splits", default="",
                        help="comma-separated splits to score with accuracy and macro-F1 "
                             "(default: dev, with GLUE's binary scores)")
    args = parser.parse_args()
    print(json.dumps(train_and_evaluate(args)))


if __name__ == "__main__":
    main()
