"""One pyarrow schema per Parquet artifact, defined here and nowhere else."""
import pyarrow as pa

from .buckets import bucketed

# One record per <page> block of the input (or per JSON line), in input order.
# Pages that could not be read keep their raw bytes and an error reason so the
# extraction stage can quarantine them without losing anything.
RAW_PAGES = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),  # ordinal in the input, 0-based
        pa.field("page_id", pa.int64()),
        pa.field("title", pa.string()),
        pa.field("namespace", pa.int32()),
        pa.field("redirect_target", pa.string()),
        pa.field("text_format", pa.string()),  # "wikitext" | "plain"
        pa.field("text", pa.string()),
        pa.field("raw", pa.binary()),  # only for unreadable pages
        pa.field("error", pa.string()),  # quarantine reason, null when readable
        pa.field("error_detail", pa.string()),
    ]
)

# Every readable page: articles are kept, the rest are filtered with a reason.
PAGES = pa.schema(
    [
        pa.field("page_id", pa.int64(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("namespace", pa.int32(), nullable=False),
        pa.field("is_redirect", pa.bool_(), nullable=False),
        pa.field("redirect_target", pa.string()),
        pa.field("kind", pa.string(), nullable=False),  # article|redirect|disambiguation|list|other_namespace
        pa.field("status", pa.string(), nullable=False),  # kept|filtered
        pa.field("filter_reason", pa.string()),
        pa.field("text", pa.string()),  # clean text, null when not cleaned
        pa.field("n_sentences", pa.int32(), nullable=False),
    ]
)

SENTENCES = pa.schema(
    [
        pa.field("sentence_id", pa.int64(), nullable=False),  # page_id * 1_000_000 + index
        pa.field("page_id", pa.int64(), nullable=False),
        pa.field("index", pa.int32(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
    ]
)

# Map side of the alias map-reduce: per input part, counts bucketed by target title
# so that one reducer sees every mention of a target together with its redirect.
ALIAS_MENTIONS = bucketed(pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("alias", pa.string(), nullable=False),
        pa.field("target", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),  # redirect|anchor
        pa.field("count", pa.int64(), nullable=False),
    ]
), "bucket")

ALIASES = pa.schema(
    [
        pa.field("alias", pa.string(), nullable=False),
        pa.field("title", pa.string(), nullable=False),  # article the alias names
        pa.field("source", pa.string(), nullable=False),  # redirect|anchor
        pa.field("count", pa.int64(), nullable=False),
    ]
)

QUARANTINE = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("page_id", pa.int64()),
        pa.field("title", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string()),
        pa.field("raw", pa.binary()),  # the input as it was, so nothing is lost
    ]
)

# One score of one model on one benchmark dataset (value x100, as in the paper), by the stable
# protocol: over random draws where the dataset has them, with what a paired difference needs.
EVAL_RESULTS = pa.schema(
    [
        pa.field("model", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),  # the mean over the draws
        pa.field("std", pa.float64(), nullable=False),  # sample standard deviation over the draws (0: one draw)
        pa.field("n", pa.int64(), nullable=False),  # draws (KMeans random states, probe seeds); 1: deterministic
        pa.field("paper_value", pa.float64()),  # the paper protocol's single draw (random state 0, probe seed 0)
        pa.field("draws", pa.list_(pa.float64())),  # each draw, in draw order (null: deterministic)
        pa.field("items", pa.list_(pa.float64())),  # per-item scores of a deterministic primary metric
        pa.field("item_targets", pa.list_(pa.float64())),  # gold per item where the metric is a correlation (BIRD)
    ]
)

# Map side of the phrase count: per sentence chunk, occurrences combined by
# (phrase key, surface form, lexical type, entity type), bucketed by phrase key so one
# reducer sees every occurrence of a phrase.
PHRASE_OCCURRENCES = bucketed(pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("phrase_key", pa.string(), nullable=False),  # normalised: NFKC, spaces, casefold
        pa.field("phrase", pa.string(), nullable=False),  # surface form
        pa.field("lexical_type", pa.string(), nullable=False),  # NP|VP|PP|ADVP|ADJP
        pa.field("entity_type", pa.string(), nullable=False),  # OntoNotes type or OTHER
        pa.field("count", pa.int64(), nullable=False),
        pa.field("sentence_ids", pa.list_(pa.int64()), nullable=False),  # first few, as examples
    ]
), "bucket")

# What happened to every sentence and occurrence of one chunk (so counts reconcile even
# when a rerun reuses finished chunks).
PHRASE_MINING_STATS = pa.schema(
    [
        pa.field("chunk", pa.int32(), nullable=False),
        pa.field("counter", pa.string(), nullable=False),  # e.g. sentences_filtered_too_long
        pa.field("value", pa.int64(), nullable=False),
    ]
)

# Parser "pmi" only: each chunk's word counts (pearl_model.phrases.pmi.pmi_words), by word bucket.
PMI_WORD_COUNTS = bucketed(pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("word", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
    ]
), "bucket")

# The corpus-wide counts of the words seen at least min_freq times (rarer ones cannot be in a
# kept n-gram); the manifest's stats.total_words counts every word, for the probabilities.
PMI_WORD_TOTALS = pa.schema(
    [
        pa.field("word", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
    ]
)

# Phrases seen at least min_freq times, each with one of the 95 labels.
PHRASES = pa.schema(
    [
        pa.field("phrase", pa.string(), nullable=False),  # most frequent surface form
        pa.field("phrase_key", pa.string(), nullable=False),
        pa.field("lexical_type", pa.string(), nullable=False),  # majority over occurrences
        pa.field("entity_type", pa.string(), nullable=False),  # majority over occurrences
        pa.field("label", pa.string(), nullable=False),  # lexical-entity, e.g. NP-ORG
        pa.field("label_id", pa.int32(), nullable=False),  # index in the fixed 95-label vocabulary
        pa.field("frequency", pa.int64(), nullable=False),
        pa.field("example_sentence_ids", pa.list_(pa.int64()), nullable=False),
    ]
)

# ner_scope "examples": each example sentence of a kept phrase, routed to the group of sentences
# parts holding it (tasks/phrase_types.py), so one task parses a group's requested sentences once.
EXAMPLE_REQUESTS = bucketed(pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),  # group of sentences parts
        pa.field("sentence_id", pa.int64(), nullable=False),
        pa.field("phrase_key", pa.string(), nullable=False),
        pa.field("phrase_bucket", pa.int32(), nullable=False),  # the untyped_phrases part it came from
    ]
), "bucket")

# The entity types the parser + NER gave a requested phrase's occurrences in its example sentences.
EXAMPLE_ENTITY_VOTES = bucketed(pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),  # phrase bucket
        pa.field("phrase_key", pa.string(), nullable=False),
        pa.field("entity_type", pa.string(), nullable=False),  # OntoNotes type or OTHER
        pa.field("count", pa.int64(), nullable=False),
    ]
), "bucket")

# fastText vectors trained on the corpus sentences: synonym neighbours for positives,
# and a target for the character encoder. The n-gram buckets' vectors (out-of-vocabulary
# words) are a (bucket, dim) float32 .npy beside the parts, WORD_VECTORS_NGRAMS, listed in
# the manifest's extra "files" with the n-gram lengths in its extra "fasttext". Its name starts
# with "_" as the manifest's does: Parquet readers (pyarrow, Spark, DuckDB's hive reader) skip
# such files, so the directory still reads as a Parquet dataset.
WORD_VECTORS_NGRAMS = "_fasttext_ngrams.npy"
WORD_VECTORS = pa.schema(
    [
        pa.field("word", pa.string(), nullable=False),  # lowercased corpus token
        pa.field("count", pa.int64(), nullable=False),  # occurrences in the corpus
        pa.field("vector", pa.list_(pa.float32()), nullable=False),
    ]
)

# Cached positives of a phrase: the augmentation kinds the training loop cannot draw on
# the fly (character edits and token swaps it makes itself).
AUGMENTATIONS = pa.schema(
    [
        pa.field("phrase_key", pa.string(), nullable=False),
        pa.field("phrase", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # wordnet|fasttext|alias|paraphrase|context
        pa.field("positive", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),  # e.g. wordnet-3.0, alias source, model
        pa.field("rank", pa.int32(), nullable=False),  # order within (phrase, kind), best first
        pa.field("sentence_id", pa.int64()),  # the corpus sentence a `context` positive comes from
    ]
)

# E5 vectors of the phrases (L2-normalised), one part per phrases part.
PHRASE_EMBEDDINGS = pa.schema(
    [
        pa.field("phrase_key", pa.string(), nullable=False),
        pa.field("vector", pa.list_(pa.float32()), nullable=False),
    ]
)

# Map side of candidate generation: a phrase under each of its blocking keys.
NEGATIVE_BLOCKS = bucketed(pa.schema(
    [
        pa.field("block_bucket", pa.int32(), nullable=False),
        pa.field("block_key", pa.string(), nullable=False),  # a q-gram of the phrase's prefix
        pa.field("phrase_key", pa.string(), nullable=False),
        pa.field("phrase", pa.string(), nullable=False),
    ]
), "block_bucket")

# Verified candidate pairs, both directions, bucketed by the query's phrase bucket.
NEGATIVE_CANDIDATES = bucketed(pa.schema(
    [
        pa.field("query_bucket", pa.int32(), nullable=False),
        pa.field("query_key", pa.string(), nullable=False),
        pa.field("candidate_key", pa.string(), nullable=False),
        pa.field("candidate", pa.string(), nullable=False),
        pa.field("edit_sim", pa.float64(), nullable=False),  # rapidfuzz Indel normalised similarity
    ]
), "query_bucket")

# Hard negatives: lexically close (edit_sim), semantically far (cosine), best first.
NEGATIVES = pa.schema(
    [
        pa.field("phrase_key", pa.string(), nullable=False),
        pa.field("phrase", pa.string(), nullable=False),
        pa.field("negative", pa.string(), nullable=False),
        pa.field("negative_key", pa.string(), nullable=False),
        pa.field("edit_sim", pa.float64(), nullable=False),
        pa.field("cosine", pa.float64(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),  # edit_sim - min-max-normalised cosine
        pa.field("rank", pa.int32(), nullable=False),
    ]
)

# What the training flow reads: one row per phrase, its label, cached positives and hard
# negatives, and a deterministic train/validation split.
_POSITIVE = pa.struct([pa.field("kind", pa.string()), pa.field("text", pa.string()),
                       pa.field("sentence_id", pa.int64())])  # sentence_id: `context` positives only
TRAINING_SET = pa.schema(
    [
        pa.field("phrase", pa.string(), nullable=False),
        pa.field("phrase_key", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("label_id", pa.int32(), nullable=False),  # index in the 95-label vocabulary
        pa.field("frequency", pa.int64(), nullable=False),
        pa.field("positives", pa.list_(_POSITIVE), nullable=False),  # cached kinds; on-the-fly ones are drawn in training
        pa.field("negatives", pa.list_(pa.string()), nullable=False),  # hard negatives, best first
        pa.field("split", pa.string(), nullable=False),  # train|validation
    ]
)

# Aliases held out of training (articles chosen by a hash of the title): the corpus's own
# validation signal, alias -> title retrieval. Same columns as `aliases`, one part per aliases part.
HELDOUT_ALIASES = pa.schema(
    [
        pa.field("alias", pa.string(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),  # redirect|anchor
        pa.field("count", pa.int64(), nullable=False),
    ]
)

# `pearl link` (pearl_model.linking.matches.top_k): each left row's k best right rows, rows being
# 0-based rows of the input tables; rank 1 is the best, equal scores ranked by right_row.
MATCHES = pa.schema(
    [
        pa.field("left_row", pa.int64(), nullable=False),
        pa.field("right_row", pa.int64(), nullable=False),
        pa.field("left", pa.string(), nullable=False),
        pa.field("right", pa.string(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),  # cosine of the two names' vectors
        pa.field("rank", pa.int32(), nullable=False),
    ]
)

# `pearl link TABLE --dedupe`: the pairs kept, each with its cluster (pearl_model.linking.clusters:
# the smallest row of the connected component the pair belongs to).
DEDUPED_MATCHES = pa.schema([*MATCHES, pa.field("cluster", pa.int64(), nullable=False)])

# The link flow's working copy of one side's column of names, in partitions of `partition_rows`
# rows (tasks/matches.py); removed once the matches are committed.
LINK_NAMES = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),  # 0-based row in the input table
        pa.field("name", pa.string()),  # null where the table's is
    ]
)

# A per-item stage's reuse store (storage/reuse.py): one row per page or sentence a build read, its
# output for it kept under the hash of the content it read, for the next dump's build to reuse.
REUSE_ENTRIES = pa.schema(
    [
        pa.field("key", pa.binary(32), nullable=False),  # SHA-256 of the content read
        pa.field("item", pa.int64(), nullable=False),  # the id it was read under (page_id, sentence_id, phrase key's)
        pa.field("digest", pa.binary(16), nullable=False),  # binds key and value to the store's identity
        pa.field("value", pa.binary(), nullable=False),  # the stage's output for it (JSON; a vector's float32 bytes)
    ]
)

ALL = {
    "raw_pages": RAW_PAGES,
    "pages": PAGES,
    "sentences": SENTENCES,
    "alias_mentions": ALIAS_MENTIONS,
    "aliases": ALIASES,
    "quarantine": QUARANTINE,
    "page_extracts": REUSE_ENTRIES,  # the pages stage's reuse store: each page's outputs but its id (JSON)
    "eval_results": EVAL_RESULTS,
    "phrase_occurrences": PHRASE_OCCURRENCES,
    "phrase_mining_stats": PHRASE_MINING_STATS,
    "pmi_word_counts": PMI_WORD_COUNTS,
    "sentence_mining": REUSE_ENTRIES,  # phrase_occurrences' reuse store: each sentence's occurrences, counts, words
    "pmi_word_totals": PMI_WORD_TOTALS,
    "phrases": PHRASES,
    "untyped_phrases": PHRASES,  # ner_scope "examples": phrases before tasks/phrase_types.py types them
    "example_requests": EXAMPLE_REQUESTS,
    "example_entity_votes": EXAMPLE_ENTITY_VOTES,
    "word_vectors": WORD_VECTORS,
    "augmentations": AUGMENTATIONS,
    "phrase_positives": REUSE_ENTRIES,  # augmentations' reuse store: each phrase's tokens, WordNet and paraphrases
    "phrase_embeddings": PHRASE_EMBEDDINGS,
    "phrase_vectors": REUSE_ENTRIES,  # phrase_embeddings' reuse store: each phrase's vector (float32 bytes)
    "negative_blocks": NEGATIVE_BLOCKS,
    "negative_candidates": NEGATIVE_CANDIDATES,
    "negatives": NEGATIVES,
    "training_set": TRAINING_SET,
    "heldout_aliases": HELDOUT_ALIASES,
    "matches": MATCHES,
    "deduped_matches": DEDUPED_MATCHES,
    "link_names": LINK_NAMES,
}
