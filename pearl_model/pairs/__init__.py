"""The training set's pairs: positives (edits, synonyms, paraphrases, context) and hard negatives of a phrase."""
