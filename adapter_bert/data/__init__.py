"""Input pipelines: GLUE and SQuAD examples -> features -> tf.data."""
