"""Task runners behind the command-line entry points (GLUE, SQuAD)."""
