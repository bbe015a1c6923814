"""The genre-transfer pipeline's tables (:mod:`jobs.genre.genre`, :mod:`jobs.genre.genre_generate`,
:mod:`jobs.genre.genre_evaluate`):
one list they all import."""

DOCUMENTS, TOPIC_CORPUS = "documents", "topic_corpus"
DOC_TOPICS, TOPIC_WORDS, PASSAGES = "genre_doc_topics", "genre_topic_words", "genre_passages"
SPLITS = "genre_splits"
PAIRS, GENERATORS, PROMPTS, GENERATED = "genre_gen_pairs", "genre_generators", "genre_prompts", "genre_generated"
SYNTHETIC, QUARANTINE = "genre_synthetic", "genre_synthetic_quarantine"
EVAL_SETS, RESULTS = "genre_eval_sets", "genre_results"
# Every evaluation classifier's test predictions, and each method judged against off-topic training on the same rows.
PREDICTIONS, EVIDENCE = "genre_predictions", "genre_evidence"
# The metrics each method is judged on (the paper's Table 4: macro-F1) and the method every other is paired with.
JUDGED, BASELINE = ("macro_f1", "accuracy"), "off_topic"
RESULT_SCHEMA = (
    "run_id string, topic int, n int, method string, model string, repeat int, seed long, "
    "accuracy double, macro_f1 double, n_train long, n_test long"
)
