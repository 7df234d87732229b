"""A run's bookkeeping in its output folder: the lock, the record and resume rule, epoch
selection."""
