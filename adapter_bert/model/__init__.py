"""The BERT network: config, layers, encoder, heads, checkpoints and the model factory."""
