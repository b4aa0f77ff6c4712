"""Training PEARL: the loop and its settings, checkpoints, the dev selection of a checkpoint, the character encoder's training."""
