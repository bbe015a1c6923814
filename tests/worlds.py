"""The small world every end-to-end test reads: one lakehouse, one config, each pipeline run once per session.

``SmallWorld`` holds the config of every pipeline's end-to-end run (a tiny scratch generator per method, few
samples, folds and seeds) in ONE :class:`AppConfig`, and runs a pipeline the first time a test asks for it.
Pipelines that share jobs share their tables (the CGA and query-reformulation pipelines both start with the
demo generator and ingest), exactly as in the demo. The notebooks test runs every notebook on the same config
file, so it reads these tables and retrains nothing. A test that changes the config and runs again works on
:meth:`SmallWorld.copy`, never on the shared lakehouse.

The synthetic inputs of the genre and compositional pipelines (documents and SemEval-shaped tweets) are written
here too; their unit tests import the writers.
"""

from __future__ import annotations

import copy
import csv
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import yaml

from common.config import load_config
from common.platform.config_loader import to_mapping

if TYPE_CHECKING:
    from common.config import AppConfig
    from common.platform.runner.job import JobContext, JobResult

# The small demo world of the function-scoped ``app_config`` fixture (conftest.py). The session world adds
# search sessions: the query graph needs enough co-clicks for reformulation pairs and a held-out set.
DEMO = [
    "demo.n_labeled=400",
    "demo.n_groups=200",
    "demo.n_sessions=400",
    "demo.partitions=2",
    "demo.bad_row_fraction=0.05",
    "spark.master=local[2]",
]
WORLD_SESSIONS = "demo.n_sessions=2000"
# The pipelines the end-to-end tests read (the others' jobs are parts of these).
END_TO_END = ("cga", "query-reformulation", "boostaug", "genre-transfer", "compositional")

# ----------------------------------------------------------------------------- genre documents
GENRES = {
    # Each genre has its own function-word style; each document one of three topics' vocabularies.
    "report": "the officials said that the {a} and the {b} were reported on {c} by the committee",
    "story": "she looked at me and i felt the {a} as we walked past the {b} into the {c} again",
    "manual": "first insert the {a} then press the {b} and check that the {c} is fixed in place",
}
TOPICS = [
    ("harbor", "ship", "cargo", "sailor", "dock"),
    ("orchard", "apple", "harvest", "farmer", "barn"),
    ("circuit", "voltage", "wire", "switch", "battery"),
]


def write_documents(path: Path) -> int:
    """A documents CSV (doc_id, text, genre): 12 documents per genre over three topics, and two bad rows.
    Returns the number of rows written."""
    rng = random.Random(3)
    rows = []
    for genre, pattern in GENRES.items():
        for i in range(12):
            topic = TOPICS[i % 3]
            sentences = [
                pattern.format(a=rng.choice(topic), b=rng.choice(topic), c=rng.choice(topic)) + "." for _ in range(12)
            ]
            rows.append((f"{genre}-{i:02d}", " ".join(sentences), genre))
    rows.append(("bad-1", "", "report"))  # quarantined: empty text
    rows.append(("bad-2", "a text without a genre", ""))  # quarantined: empty genre
    # Repeats, as real corpora have them: a syndicated copy under another id (other case), and an id given twice.
    rows.append(("report-00-again", rows[0][1].upper(), "report"))  # quarantined: duplicate of report-00
    rows.append(rows[13])  # story-01 again: duplicate of story-01
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["doc_id", "text", "genre"])
        writer.writerows(rows)
    return len(rows)


# ----------------------------------------------------------------------------- multi-label tweets
LABELS = ["anger", "fear", "joy", "love", "sadness"]
WORDS = {
    "anger": ["furious", "rage", "outraged"],
    "fear": ["scared", "terrified", "afraid"],
    "joy": ["happy", "delighted", "glad"],
    "love": ["adore", "darling", "sweetheart"],
    "sadness": ["crying", "miserable", "gloomy"],
}
FILLER = "today this morning again really so just the weather at work".split()


def tweet(rng: random.Random, labels: list[str]) -> str:
    """Two words of each label's vocabulary and four filler words, shuffled."""
    words = [rng.choice(WORDS[label]) for label in labels for _ in range(2)] + rng.sample(FILLER, 4)
    rng.shuffle(words)
    return " ".join(words)


def multilabel_tsv(path, n: int = 400, seed: int = 0) -> list[list[str]]:
    """A SemEval-shaped TSV (ID, Tweet, one 0/1 column per label): single labels and pairs. Returns the rows."""
    rng = random.Random(seed)
    sets = [[label] for label in LABELS] + [
        ["anger", "fear"],
        ["joy", "love"],
        ["fear", "sadness"],
        ["anger", "sadness"],
        ["joy", "sadness"],
        ["love", "sadness"],
    ]
    rows = []
    for i in range(n):
        labels = sets[i % len(sets)]
        rows.append([f"t{i:04d}", tweet(rng, labels)] + ["1" if label in labels else "0" for label in LABELS])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(["ID", "Tweet"] + LABELS)
        writer.writerows(rows)
    return rows


# What plant_repeats adds to a multilabel_tsv file, and the reasons ingest gives them: the first tweet again with
# its labels (a duplicate), the second again with other labels (a conflict: both copies go).
PLANTED_REASONS = {"duplicate of t0000": 1, "conflicting labels": 2}


def plant_repeats(path, rows: list[list[str]]) -> None:
    """Append repeated tweets to :func:`multilabel_tsv`'s file (see :data:`PLANTED_REASONS`)."""
    first, second = rows[0], rows[1]
    other_labels = ["1" if v == "0" else "0" for v in second[2:]]
    with open(path, "a", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(["t9000", first[1]] + first[2:])
        writer.writerow(["t9001", second[1]] + other_labels)


def multilabel_spec(path):
    """The InputSpec that reads :func:`multilabel_tsv`'s file."""
    from common.data.config import InputSpec

    return InputSpec(
        path=str(path),
        format="csv",
        options={"sep": "\t", "quote": ""},
        rename={"ID": "example_id", "Tweet": "text"},
        label_columns=list(LABELS),
    )


# ----------------------------------------------------------------------------- the config
def _tiny_t5(vocab_size: int, d_model: int, heads: int, **lengths):
    from common.models.config import ScratchT5Config, T5ModelConfig

    return T5ModelConfig(
        kind="scratch_t5",
        scratch=ScratchT5Config(
            vocab_size=vocab_size, d_model=d_model, d_ff=2 * d_model, num_layers=1, num_heads=heads
        ),
        **lengths,
    )


# A tiny sentiment corpus for BoostAug's surrogate tests: each review's label is in its words.
POSITIVE_REVIEWS = [
    "a great and moving film",
    "truly wonderful acting",
    "funny , warm and smart",
    "a delightful story",
    "brilliant and beautiful",
    "the best film this year",
    "charming , witty fun",
    "an excellent cast",
    "a joyous , tender triumph",
]
NEGATIVE_REVIEWS = [
    "a dull and tedious mess",
    "truly awful acting",
    "boring , cold and stupid",
    "a dreadful story",
    "ugly and pointless",
    "the worst film this year",
    "lifeless , witless junk",
    "a terrible cast",
    "a grim , sour failure",
]


def write_reviews_csv(path: Path, per_label: int, n_train: int) -> None:
    """The first ``per_label`` reviews of each label as a BoostAug texts CSV (text, label, split): the first
    ``n_train`` of each label in train, the rest in test, and one dev review per label."""
    import pandas as pd

    rows = [
        (t, label, "test" if i >= n_train else "train")
        for texts, label in ((POSITIVE_REVIEWS, "pos"), (NEGATIVE_REVIEWS, "neg"))
        for i, t in enumerate(texts[:per_label])
    ]
    rows += [("a fine film", "pos", "dev"), ("a poor film", "neg", "dev")]
    pd.DataFrame(rows, columns=["text", "label", "split"]).to_csv(path, index=False)


# The prefix of the world's registered models' names (the session's tests share one MLflow registry).
WORLD_MODELS = "world_"
# The queries the world's reformulators rewrite (query_reformulation.sources): fewer than it collects.
QR_SOURCES = 60


def world_config(folder: Path, tracking_uri: str) -> "AppConfig":
    """Every pipeline's end-to-end settings in one config, its lakehouse in ``folder / "lakehouse"`` and its
    synthetic inputs in ``folder`` (written by :class:`SmallWorld`)."""
    from common.boostaug.config import BoostAugConfig, FilterConfig, SurrogateConfig
    from common.boostaug.config import EvalConfig as BoostEvalConfig
    from common.catalog.config import CGAConfig, CGASweepConfig, ConsistencyConfig
    from common.compositional.config import (
        CompositionalConfig,
        LabelGeneratorConfig,
        QualityConfig,
        TextGeneratorConfig,
    )
    from common.compositional.config import EvalConfig as CompositionalEvalConfig
    from common.compositional.config import SplitConfig as CompositionalSplitConfig
    from common.data.config import InputSpec
    from common.genre.config import EvalConfig as GenreEvalConfig
    from common.genre.config import GeneratorConfig, GenreConfig, SplitConfig, TopicModelConfig
    from common.models.classifier_config import EncoderConfig, FastTextConfig
    from common.models.config import FineTuneConfig, GenerationConfig
    from common.querygraph.config import MatcherConfig, QueryReformulationConfig

    cfg = load_config(
        None,
        [
            f"lakehouse.root={folder / 'lakehouse'}",
            f"tracking.uri={tracking_uri}",
            "tracking.experiment=test-small-world",
            *DEMO,
            WORLD_SESSIONS,
            # the maintenance notebook compacts two tables
            "maintenance.tables=[consistency_results,query_clusters]",
            # the world's registered models, apart from other tests' in the session's registry
            f"registry.name_prefix={WORLD_MODELS}",
        ],
    )
    cfg.consistency = ConsistencyConfig(
        methods=["baseline", "cst_ss"], consistency_test=40, repeats=1, fasttext=FastTextConfig(bucket=20000, epoch=10)
    )
    cfg.cga = CGAConfig(
        model=_tiny_t5(300, 32, 4),
        fine_tune=FineTuneConfig(epochs=2, learning_rate=1e-3, batch_size=64, num_cpus=2),
        # A small max_source_tokens sends the longest titles to quarantine: the accounting must still hold.
        generation=GenerationConfig(n_samples=2, max_new_tokens=12, max_source_tokens=16, concurrency=1),
        max_pairs_per_group=4,
        threshold=0.2,
        sweep=CGASweepConfig(thresholds=[0.1, 0.3], sizes=[30], fixed_size=30, fixed_threshold=0.2),
    )
    cfg.query_reformulation = QueryReformulationConfig(
        model=_tiny_t5(300, 32, 4),
        fine_tune=FineTuneConfig(
            epochs=2, learning_rate=1e-3, batch_size=32, grad_accumulation=2, num_cpus=2, checkpoint_every=0
        ),
        generation=GenerationConfig(n_samples=2, max_new_tokens=10, concurrency=1),
        matcher=MatcherConfig(epoch=5, ks=[1, 5], repeats=2),
        sources=QR_SOURCES,
    )
    # A fold surrogate learns from one fold of ~90 titles here: fastText (the features kind has its own tests),
    # 50 epochs, and a 0.6 confidence threshold (fastText is rarely 0.99 sure on so little; the paper's
    # DeBERTa is), leave candidates on both sides of every filter.
    cfg.boostaug = BoostAugConfig(
        n_aug=2,
        folds=3,
        label_level=1,
        surrogate=SurrogateConfig(kind="fasttext", epochs=[50]),
        filter=FilterConfig(confidence_threshold=0.6),
        eval=BoostEvalConfig(repeats=2, curve=[0, 1, 2]),
    )
    cfg.inputs.documents = InputSpec(path=str(folder / "documents.csv"))
    cfg.genre = GenreConfig(
        topic_model=TopicModelConfig(topics=3, max_iter=20, min_df=1.0, max_df=None),
        window_chars=200,
        split=SplitConfig(sizes=[3, 100], test_fraction=0.25, max_topics=1),
        generator=GeneratorConfig(
            model=_tiny_t5(200, 32, 2, max_source_length=16, max_target_length=24),
            fine_tune=FineTuneConfig(epochs=1, learning_rate=3e-3, batch_size=16, checkpoint_every=0),
            # A prompt is 10 keywords of a topic the genre's tokenizer never saw (often letter by letter): up to
            # ~90 tokens, which the model reads whole rather than quarantine.
            generation=GenerationConfig(n_samples=1, max_new_tokens=24, max_source_tokens=96, batch_size=32),
            max_passages_per_doc=2,
            cache_models=2,
            off_topic_control=True,
        ),
        eval=GenreEvalConfig(repeats=2),
    )
    cfg.inputs.multilabel = multilabel_spec(folder / "multilabel.tsv")
    fast = FastTextConfig(loss="ova", epoch=10, lr=0.2, dim=20, bucket=10000)
    cfg.compositional = CompositionalConfig(
        split=CompositionalSplitConfig(compositions=2, support=10, min_examples=20),
        label_generator=LabelGeneratorConfig(smoothing=0.1),
        generator=TextGeneratorConfig(
            model=_tiny_t5(120, 16, 2, max_source_length=8, max_target_length=16),
            fine_tune=FineTuneConfig(epochs=1, learning_rate=3e-3, batch_size=32, checkpoint_every=0),
            generation=GenerationConfig(n_samples=1, max_new_tokens=12, max_source_tokens=16, batch_size=64),
            prefix_length=2,
        ),
        # QC by the paper's kind of filter: the encoder with a sigmoid head (tiny budget); evaluation by fastText.
        qc=QualityConfig(
            target=15,
            overgenerate=2.0,
            fasttext=fast,
            model="encoder",
            encoder=EncoderConfig(
                max_length=16,
                epochs=1,
                batch_size=32,
                learning_rate=1e-3,
                mlm_weight=0.0,
                max_batch_tokens=1024,
                num_cpus=1,
            ),
        ),
        eval=CompositionalEvalConfig(repeats=2, validation_fraction=0.1, fasttext=fast, curve=[0.5]),
    )
    return cfg


# ----------------------------------------------------------------------------- the world
class SmallWorld:
    """One session lakehouse holding each pipeline's tables, each pipeline run once, on first request.

    ``cfg``, ``ctx`` and ``lakehouse`` are shared by every test: read them, never change them (use
    :meth:`copy`). ``n_documents`` is the documents file's rows; ``multilabel_rows`` the tweets written before
    :func:`plant_repeats` added its two.
    """

    def __init__(self, spark, capabilities, folder: Path, tracking_uri: str):
        from common.platform.runner.job_context import build_context

        self.folder = folder
        self.n_documents = write_documents(folder / "documents.csv")
        self.multilabel_rows = multilabel_tsv(folder / "multilabel.tsv", n=330)
        plant_repeats(folder / "multilabel.tsv", self.multilabel_rows)
        # Loaded back from its own YAML file: the notebooks and the CLI read that file, and the config a file
        # gives is the one whose lineage keys they must meet (a count typed float reads back as 40.0, not 40).
        self._config_file = folder / "world.yaml"
        self._config_file.write_text(
            yaml.safe_dump(to_mapping(world_config(folder, tracking_uri)), sort_keys=False), encoding="utf-8"
        )
        self.cfg = load_config(str(self._config_file))
        self._spark, self._capabilities = spark, capabilities
        self.ctx: "JobContext" = build_context(self.cfg, spark=spark, capabilities=capabilities)
        self.lakehouse = self.ctx.lakehouse
        self._results: dict[str, dict[str, "JobResult"]] = {}
        self.progress: dict[str, list[str]] = {}  # each pipeline's progress lines, from its one run

    def run(self, pipeline: str) -> dict[str, "JobResult"]:
        """The results, by job name, of ``pipeline``'s one run on this world (run now when it is the first ask)."""
        from jobs import PIPELINES, run_pipeline

        if pipeline != "foundation" and "generate-demo" in PIPELINES[pipeline]:
            # The demo's own run first, so its results hold the first (not skipped) writes of its tables.
            self.run("foundation")
        if pipeline not in self._results:
            lines = self.progress.setdefault(pipeline, [])
            self._results[pipeline] = {
                r.job: r for r in run_pipeline(self.ctx, pipeline, PIPELINES[pipeline], progress=lines.append)
            }
        return self._results[pipeline]

    def run_every_pipeline(self) -> None:
        """Run each end-to-end pipeline that has not run yet (what the notebooks and the summary read)."""
        for pipeline in END_TO_END:
            self.run(pipeline)

    def rerun(self, pipeline: str) -> list["JobResult"]:
        """``pipeline`` run again on the same config and inputs (what an idempotent rerun must skip)."""
        from jobs import PIPELINES, run_pipeline

        self.run(pipeline)
        return run_pipeline(self.ctx, pipeline, PIPELINES[pipeline])

    def config_file(self) -> Path:
        """This world's whole config as a YAML file (what a notebook or ``augment run --conf`` loads)."""
        return self._config_file

    def copy(self, folder: Path, tables: Sequence[str] = ()) -> "JobContext":
        """A context on a copy of this world's lakehouse in ``folder`` (only ``tables``, with every version,
        when given) with a copy of its config: for tests that change the config and run jobs again. The caller
        closes it."""
        from common.platform.runner.job_context import build_context

        if tables:
            for table in tables:
                shutil.copytree(self.lakehouse.location(table), folder / "lakehouse" / table, symlinks=True)
        else:
            shutil.copytree(self.cfg.lakehouse.root, folder / "lakehouse", symlinks=True)
        cfg = copy.deepcopy(self.cfg)
        cfg.lakehouse.root = str(folder / "lakehouse")
        cfg.tracking.experiment = f"test-copy-{folder.name}"
        cfg.registry.name_prefix = f"copy_{folder.name}_"  # the copy's models are not the world's versions
        return build_context(cfg, spark=self._spark, capabilities=self._capabilities)

    def close(self) -> None:
        self.ctx.close()


def check_card(world: SmallWorld, result: "JobResult", table: str) -> str:
    """The dataset card of the version of ``table`` that job ``result`` wrote, checked against that version's
    commit (rows, job, config hash, every input version) and the job's MLflow run; returns its text."""
    import mlflow

    version = result.outputs[table].version
    text = (Path(world.cfg.lakehouse.root) / "cards" / table / f"v{version}.md").read_text(encoding="utf-8")
    lineage = next(c for c in world.lakehouse.history(table) if c.version == version).lineage
    assert text.startswith(f"# Dataset card: {table} v{version}\n")
    assert f"| rows | {world.lakehouse.read(table, version).count():,} |" in text
    assert f"| job | {result.job} (MLflow run `{result.run_id}`) |" in text
    assert f"| config hash | `{lineage['config_hash']}` |" in text and lineage["inputs"]
    assert all(f"{name} v{v}" in text for name, v in lineage["inputs"].items())
    assert "## Generator" in text and "## Filter" in text
    logged = mlflow.MlflowClient(world.cfg.tracking_uri).list_artifacts(result.run_id, f"cards/{table}")
    assert f"cards/{table}/v{version}.md" in {a.path for a in logged}
    return text
