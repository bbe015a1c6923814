"""The tables the results summary (:mod:`jobs.summary.summary`) reads: each pipeline's results table with its page and
report folders and what its paper reports for comparison, and each generative method's generation table with what
its source and output are and the config section of its generator."""

CONSISTENCY = "consistency_results"
MATCHER = "matcher_results"
BOOSTAUG = "boostaug_results"
GENRE = "genre_results"
COMPOSITIONAL = "compositional_results"
# The evidence tables of a results table's methods (each method against its baseline on the same rows), in order:
# a later table's row for a method replaces an earlier one's.
CONSISTENCY_EVIDENCE = ("consistency_evidence", "cga_evidence")
BOOSTAUG_EVIDENCE = ("boostaug_evidence",)
GENRE_EVIDENCE = ("genre_evidence",)
# Each generative method's generation table (the shared generation schema: source_text, generated_text,
# sample_idx, model_version, reason) and what its source and output are.
# (table, method, source, output, the config section of its generator: model and fine_tune).
GENERATED = (
    ("cga_generated", "CGA", "title", "title variant", lambda c: c.cga),
    ("query_reformulations", "query reformulation", "query", "reformulation", lambda c: c.query_reformulation),
    ("boostaug_infill_generated", "BoostAug contextual", "text with a gap", "fill", lambda c: c.boostaug.contextual),
    ("genre_generated", "genre transfer", "keywords", "document", lambda c: c.genre.generator),
    ("cg_generated", "compositional", "labels", "text", lambda c: c.compositional.generator),
)
# What each paper reports for the comparison its section shows, so a reader can place the figure
# (../shared/docs/METHODS.md and the papers' tables).
PAPER = {
    CONSISTENCY: "the paper (184k labeled titles, 5 runs): F1 0.665 baseline, CST-SS 0.661, CGA 0.667; consistency "
    "0.738 baseline, CST-Full 0.813, CST-SS 0.790, CGA 0.771",
    MATCHER: "the paper (a large e-commerce click log, T5 reformulations): +19.6% product accuracy of the semantic "
    "matcher trained on the augmented log",
    BOOSTAUG: "the paper (SST-2, 5 seeds): BERT accuracy 92.47 with no augmentation, 92.48 with BoostAug; larger "
    "gains on small sets and weak models (LSTM), and plain EDA can lower accuracy",
    GENRE: "the paper (t5-small generators, 25 topics): +2 to +4 macro-F1 points for augmented over off-topic "
    "training",
    COMPOSITIONAL: "the paper (SemEval CG split, BERT): exact-set accuracy 2.85 with no augmentation, 8.29 with "
    "LS-PT's and 8.01 with Flan-T5's quality-controlled synthetic texts",
}
# Each results table's page, and the report folders (<root>/reports/<name>) whose charts it shows.
PAGES = {
    CONSISTENCY: ("consistency", ("consistency", "cga")),
    MATCHER: ("query-reformulation", ("query_reformulation",)),
    BOOSTAUG: ("boostaug", ("boostaug",)),
    GENRE: ("genre-transfer", ("genre",)),
    COMPOSITIONAL: ("compositional", ("compositional",)),
}
