"""The BoostAug pipeline's tables (:mod:`jobs.boostaug.boostaug`, :mod:`jobs.boostaug.boostaug_filter`,
:mod:`jobs.boostaug.boostaug_evaluate`): one list they all import."""

TEXTS, CANDIDATES, KEPT, REJECTS = "boostaug_texts", "boostaug_candidates", "boostaug_kept", "boostaug_rejects"
SCORED, EMBEDDINGS = "boostaug_scored", "boostaug_candidate_embeddings"
INFILL_PAIRS, PROMPTS, GENERATED = "boostaug_infill_pairs", "boostaug_infill_prompts", "boostaug_infill_generated"
CONTEXTUAL_REJECTS = "boostaug_contextual_rejects"
EVAL_SETS, RESULTS = "boostaug_eval_sets", "boostaug_results"
# Every evaluation classifier's test predictions, and each method judged against none on the same rows.
PREDICTIONS, EVIDENCE = "boostaug_predictions", "boostaug_evidence"
# The metrics each method is judged on (the paper's Table 2).
JUDGED = ("accuracy", "macro_f1")
RESULT_SCHEMA = (
    "run_id string, method string, backend string, model string, n_aug int, repeat int, seed long, "
    "accuracy double, macro_f1 double, n_train long, n_augmented long"
)
