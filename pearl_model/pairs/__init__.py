"""The training set's pairs: positives (character and token edits, synonyms, paraphrases, context) and hard negatives of a phrase."""
