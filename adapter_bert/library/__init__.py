"""The Keras library of your own texts: `TextClassifier`, a Keras model whose methods take
strings, and the in-graph preprocessing it maps over its data."""
