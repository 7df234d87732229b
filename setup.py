"""Packaging for adapter-bert (TensorFlow 2 / tf-keras)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"',
                    Path(__file__).with_name("adapter_bert").joinpath("__init__.py").read_text()).group(1)

setup(
    name="adapter-bert-tf2",
    version=VERSION,
    description="Parameter-efficient transfer learning for BERT (Houlsby adapters) in TensorFlow 2 / Keras",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["adapter_bert", "adapter_bert.*"]),
    py_modules=["run_classifier", "run_squad"],
    install_requires=[
        "tensorflow==2.21.*",
        "tf-keras==2.21.*",
        # transformers 5 drops the TF models our reference tests compare against.
        "transformers>=4.57,<5",
        "tokenizers>=0.20",
        "safetensors>=0.4",
        "absl-py>=2.0",
        "numpy>=1.26",
        "scipy>=1.11",
        "scikit-learn>=1.3",
        "tensorflow-datasets>=4.9",
        "tensorboard>=2.16",
    ],
    extras_require={
        # Tests draw the ablation heatmap and sweep plots, so they need matplotlib too.
        "test": ["pytest>=8", "matplotlib>=3.7"],
        "plots": ["matplotlib>=3.7"],
        # Cloud TPU VMs ship their own TensorFlow build; this only pins the client lib.
        "tpu": ["cloud-tpu-client>=0.10"],
        # Exported SavedModels tokenise in the graph with tensorflow-text's ops; its
        # version must match TensorFlow's minor version.
        "serving": ["tensorflow-text==2.21.*"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Framework :: TensorFlow",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
