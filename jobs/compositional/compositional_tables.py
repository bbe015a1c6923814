"""The compositional pipeline's tables (:mod:`jobs.compositional.compositional`,
:mod:`jobs.compositional.compositional_generate`,
:mod:`jobs.compositional.compositional_evaluate`): one list they all import."""

MULTILABEL = "multilabel"
CG_TRAIN, CG_SUPPORT, CG_TEST, IID_TRAIN, IID_TEST = "cg_train", "cg_support", "cg_test", "iid_train", "iid_test"
LABEL_SETS = "cg_label_sets"
PROMPTS, PAIRS, GENERATED, CANDIDATES = "cg_prompts", "cg_gen_pairs", "cg_generated", "cg_candidates"
QC_PREDICTIONS, SYNTHETIC, REJECTS = "cg_qc_predictions", "cg_synthetic", "cg_rejects"
PREDICTIONS, RESULTS = "compositional_predictions", "compositional_results"
SEQ2SEQ = ("t5_labels", "label_prefix")  # the generative methods
