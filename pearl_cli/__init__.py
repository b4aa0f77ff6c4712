"""The `pearl` command line: phrase embeddings from the shell and the model registry."""
