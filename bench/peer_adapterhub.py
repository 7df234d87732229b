"""AdapterHub's Houlsby adapters on the same MiniLM, timed as bench.speed times ours.

Run by bench.dtype_speed with a Python that has PyTorch, transformers 4.57 and
`adapters` 1.3 (not this package, not TensorFlow). One measurement per process; prints
one JSON line.

- train: Houlsby adapters ("double_seq_bn", bottleneck 64 on hidden 384, gelu) plus every
  LayerNorm and the classifier head trained, AdamW (lr 1e-3, epsilon 1e-6, weight decay
  0.01), gradient clipping at 1.0, batch --batch padded to --seq; the median of --steps
  timed steps after --warmup untimed ones. --dtype=bfloat16 runs forward and loss under
  `torch.autocast("cpu", dtype=torch.bfloat16)`, as AdapterHub users do.
- infer: the same model, batch 64, median of --steps forward passes under
  `torch.inference_mode()` (and autocast for bfloat16).

Usage (the peer's Python):
    python bench/peer_adapterhub.py --worker=train --dtype=float32 --model_dir=<MiniLM>
"""

import argparse
import contextlib
import json
import time


def _model(model_dir: str):
    import torch
    # Run as a script, this folder is on the path: the model is the GLUE peer's.
    from peer_glue import build_model
    torch.manual_seed(42)
    return build_model("adapterhub", model_dir)


def _batch(batch: int, seq: int, vocab: int):
    import torch
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, vocab, (batch, seq), generator=generator)
    segments = (torch.arange(seq)[None, :] >= seq // 2).long().repeat(batch, 1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "token_type_ids": segments}, torch.randint(0, 2, (batch,), generator=generator)


def _autocast(dtype: str):
    import torch
    if dtype == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def train(args) -> dict:
    import torch
    model = _model(args.model_dir)
    model.train()
    inputs, labels = _batch(args.batch, args.seq, model.config.vocab_size)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3, eps=1e-6, weight_decay=0.01)
    durations = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        with _autocast(args.dtype):
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if step >= args.warmup:
            durations.append(time.perf_counter() - start)
    step = _median(durations)
    return {"examples_per_s": args.batch / step, "step_ms": 1000 * step,
            "trainable_params": int(sum(p.numel() for p in trainable))}


def infer(args) -> dict:
    import torch
    model = _model(args.model_dir)
    model.eval()
    inputs, _ = _batch(64, args.seq, model.config.vocab_size)
    durations = []
    with torch.inference_mode():
        for step in range(2 + args.steps):
            start = time.perf_counter()
            with _autocast(args.dtype):
                model(**inputs).logits.float().numpy()
            if step >= 2:
                durations.append(time.perf_counter() - start)
    return {"examples_per_s": 64 / _median(durations)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("train", "infer"), required=True)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    import torch
    result = (train if args.worker == "train" else infer)(args)
    result.update(torch=torch.__version__, threads=torch.get_num_threads())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
