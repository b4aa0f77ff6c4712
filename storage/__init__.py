"""Where pipeline artifacts live and what they look like.

Imports nothing from pearl_model, tasks or flows: the bottom floor.
"""
from storage.datasets import Dataset, DatasetIncomplete, SchemaMismatch, dataset_version
from storage import schemas

__all__ = ["Dataset", "DatasetIncomplete", "SchemaMismatch", "dataset_version", "schemas"]
