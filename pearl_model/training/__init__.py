"""Training PEARL: the loop, its settings, checkpoints, the dev selection of a checkpoint, the character encoder."""
