"""The runs of bench.robust_defaults' suites: each run as a spec (task, mode, rate, epochs,
seed and what else sets it apart), its id (the record's file name) and each suite's specs in
the order they run."""

SEEDS = (42, 43, 44)
SUITES = ("mrpc", "squad", "stability", "squad_padding", "squad_optimizer", "squad_full")
MODES = ("adapter", "full")
# The GLUE tasks runs can use: spec "task" -> their folder in glue_data (and --task_name).
GLUE_FOLDERS = {"cola": "CoLA", "sst-2": "SST-2", "mrpc": "MRPC", "rte": "RTE"}
# A run's dtype in its id; float32 runs (the specs without a "dtype") carry no tag.
DTYPE_TAGS = {"mixed_bfloat16": "bf16", "mixed_float16": "fp16"}
# A spec's "optimizer", when it has one, names the runner flags it adds (and tags its id):
# "corrected" is plain bias-corrected AdamW, what AdapterHub and PyTorch users train with.
OPTIMIZER_FLAGS = {None: [], "corrected": ["--adam_bias_correction"]}
# Item targets for the MRPC adapter cells (mean accuracy, mean F1, lowest seed accuracy).
MRPC_TARGET = (80.0, 86.0, 78.0)


def run_id(spec) -> str:
    """The run's file name: everything that makes it differ from another run."""
    parts = [spec["task"], spec.get("backbone", "minilm"), spec["mode"], spec["lr"],
             f"{spec['epochs']:g}ep"]
    if spec["task"].startswith("squad"):
        parts.append(f"{spec['questions']}q")
    if spec.get("padding"):
        parts.append("fixedpad")
    if spec.get("dtype", "float32") != "float32":
        parts.append(DTYPE_TAGS[spec["dtype"]])
    if spec.get("optimizer"):
        parts.append(spec["optimizer"])
    parts.append(f"seed{spec['seed']}")
    return "_".join(parts)


def glue_spec(task, mode, lr, epochs, seed, backbone="minilm"):
    return {"task": task, "mode": mode, "lr": lr, "epochs": epochs, "seed": seed,
            "backbone": backbone}


def squad_spec(lr, seed):
    """The `squad` setting: 1,500 training questions, 2 epochs, seq 256, batch 16."""
    return {"task": "squad", "mode": "adapter", "lr": lr, "epochs": 2, "seed": seed,
            "questions": 1500, "max_seq_length": 256, "batch_size": 16, "eval_articles": 1}


def suite_specs(suite):
    """The runs of one suite, in the order they run (seed 42 of every cell first)."""
    if suite == "mrpc":
        settings = (("1e-3", 3), ("3e-3", 3), ("3e-4", 5))
        specs = [glue_spec("mrpc", "adapter", lr, ep, seed) for seed in SEEDS
                 for lr, ep in settings]
        specs += [glue_spec("mrpc", "full", "5e-5", 3, seed) for seed in SEEDS]
        specs += [glue_spec("mrpc", "adapter", lr, ep, seed, backbone="tf1") for seed in SEEDS
                  for lr, ep in settings]
        return specs
    if suite == "stability":
        cells = [("adapter", lr) for lr in ("3e-4", "1e-3", "3e-3")] + \
                [("full", lr) for lr in ("2e-5", "5e-5")]
        return [glue_spec(task, mode, lr, 3, seed) for task in ("mrpc", "rte")
                for seed in SEEDS for mode, lr in cells]
    if suite == "squad":
        return [squad_spec(lr, seed) for seed in SEEDS for lr in ("1e-3", "3e-4", "3e-3")]
    if suite == "squad_padding":
        # Dynamic padding is the spec without a "padding" key (its run is the squad suite's).
        return [{**squad_spec("1e-3", seed), **padding} for seed in SEEDS
                for padding in ({}, {"padding": "max_seq_length"})]
    if suite == "squad_optimizer":
        # The default optimizer's run is the squad suite's (the spec without "optimizer").
        return [{**squad_spec("1e-3", seed), **optimizer} for seed in SEEDS
                for optimizer in ({}, {"optimizer": "corrected"})]
    if suite == "squad_full":
        return [{"task": "squad_full", "mode": mode, "lr": lr, "epochs": 2, "seed": 42,
                 "questions": 11877, "max_seq_length": 384, "batch_size": 32,
                 "eval_articles": None, "save_checkpoints_steps": 100} for mode, lr in (("adapter", "1e-3"), ("full", "5e-5"))]
    raise ValueError(f"unknown suite {suite!r}")
