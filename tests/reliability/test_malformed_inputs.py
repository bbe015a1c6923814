"""A corpus of malformed inputs: each is quarantined row by row with a reason (rows in = kept + quarantined)
or refused with one line naming the file, the column and (where there is one) the row; never a silent drop,
never a JVM stack trace as the only message. Hand-made cases plus property-based ones (hypothesis).

Every case goes through the ingest path's own functions: read_input -> with_reasons -> reason_counts ->
kept / rejected (``jobs/foundation/ingest_input.py:ingest_one`` adds only the writes).
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.data.config import IngestConfig, InputSpec
from common.data.csv_input import MALFORMED_CSV
from common.data.quarantine import kept, reason_counts, rejected, with_reasons
from common.data.raw_input import MALFORMED_LINE
from common.data.readers import read_input
from common.data.schemas import CATALOG, INTERACTIONS, LABELED, MULTILABEL, TEXTS, Contract
from common.platform.errors import InputError

LABELED_HEAD = "item_id,title,category\n"
COUNTS_HEAD = "query,product_id,interaction,count\n"
CONTROL = "invalid text in title: control or undecodable characters"
NO_LETTERS = "invalid text in title: no letters or digits"
MALFORMED = MALFORMED_LINE  # a JSON line
# A CSV's record read record by record (multiLine), line by line as the user asked, line by line as the reader chose
RECORD, LINE, CHOSEN = MALFORMED_CSV["true"], MALFORMED_CSV["false"], MALFORMED_CSV["auto"]
EMPTY_LEVEL = "malformed category path: empty level"
NOT_INT = "count is not an integer"


@dataclass
class Case:
    """One bad input: its files (name -> bytes, or a writer of the folder), the contract it is read as, the
    InputSpec options, and what must happen: ``reasons`` ({reason or None for kept: rows}) or ``error`` (a
    regex the one-line message must match, after the file's name)."""

    name: str
    contract: Contract
    files: Union[dict[str, bytes], Callable]
    reasons: Optional[dict] = None
    error: Optional[str] = None
    spec: dict = field(default_factory=dict)
    ingest: dict = field(default_factory=dict)
    path: str = ""  # relative path the spec reads; default the only file


def labeled(*rows: str, head: str = LABELED_HEAD, encoding: str = "utf-8") -> dict[str, bytes]:
    return {"labeled.csv": (head + "".join(r + "\n" for r in rows)).encode(encoding, errors="surrogateescape")}


def counts(*rows: str) -> dict[str, bytes]:
    return {"interactions.csv": (COUNTS_HEAD + "".join(r + "\n" for r in rows)).encode()}


def jsonl(*lines: str) -> dict[str, bytes]:
    return {"catalog.jsonl": "".join(line + "\n" for line in lines).encode()}


def parquet(name: str = "data.parquet", transform: Callable[[bytes], bytes] = lambda b: b, **columns) -> Callable:
    def write(folder):
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = list(columns)
        table = pa.Table.from_arrays(
            [pa.array(v) if not isinstance(v, pa.Array) else v for v in columns.values()],
            names=[n.rstrip("_") for n in names],
        )
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        (folder / name).write_bytes(transform(buffer.getvalue()))

    return write


GOOD = "1,Blue coffee mug,Home > Mugs"
CASES = [
    # --- encodings, BOM, bytes that are not text
    Case(
        "latin-1 file read as UTF-8",
        LABELED,
        labeled("1,Caf\xe9 mug,Home > Mugs", GOOD, encoding="latin-1"),
        {CONTROL: 1, None: 1},
    ),
    Case(
        "UTF-8 BOM before the header",
        LABELED,
        {"labeled.csv": b"\xef\xbb\xbf" + (LABELED_HEAD + GOOD).encode()},
        {None: 1},
    ),
    Case(
        "UTF-16 file",
        LABELED,
        {"labeled.csv": (LABELED_HEAD + GOOD + "\n").encode("utf-16")},
        error=r"header holds NUL bytes.*UTF-16",
    ),
    Case("NUL byte in a title", LABELED, labeled("1,Blue\x00mug,Home > Mugs", GOOD), {CONTROL: 1, None: 1}),
    Case(
        "DEL and bell characters",
        LABELED,
        labeled("1,Bell\x07 helmet,Sports", "2,Mug\x7f,Home", GOOD),
        {CONTROL: 2, None: 1},
    ),
    Case(
        "invalid UTF-8 byte sequence",
        LABELED,
        {"labeled.csv": LABELED_HEAD.encode() + b"1,Mug \xff\xfe blue,Home > Mugs\n" + GOOD.encode() + b"\n"},
        {CONTROL: 1, None: 1},
    ),
    Case("zero-width characters only", LABELED, labeled("1,\u200b\u200b\u200b,Home", GOOD), {NO_LETTERS: 1, None: 1}),
    # --- quoting and line structure
    # A valid file (RFC 4180: a quoted field may hold line breaks and commas) is read record by record; one that
    # cannot be (a quote left open or unescaped would join lines into one record, silently where a later quote closes
    # it) is read line by line, each bad line quarantined alone, the reason saying so.
    Case(
        "embedded newline (RFC 4180), read by default", LABELED, labeled('1,"Blue\nmug",Home > Mugs', GOOD), {None: 2}
    ),
    Case("a quoted line break, then text with a comma", LABELED, labeled('1,"Mug\n10,5 cm",Home', GOOD), {None: 2}),
    Case(
        "embedded newline, multiLine off",
        LABELED,
        labeled('1,"Blue\nmug",Home > Mugs', GOOD),
        {LINE: 2, None: 1},
        spec={"options": {"multiLine": "false"}},
    ),
    Case("escaped quotes and commas", LABELED, labeled('1,"Acme ""Pro"" mug, blue",Home > Mugs'), {None: 1}),
    Case("unbalanced quote", LABELED, labeled('1,"Blue mug,Home > Mugs', GOOD), {CHOSEN: 1, None: 1}),
    Case(
        "unbalanced quote, then a quote later",
        LABELED,
        labeled('1,"Blue mug,Home > Mugs', GOOD, '2,"Red mug",Home', "3,Pan,Home"),
        {CHOSEN: 1, None: 3},
    ),
    Case(
        "unbalanced quote, multiLine on",
        LABELED,
        labeled('1,"Blue mug,Home > Mugs', GOOD),
        {RECORD: 1},
        spec={"options": {"multiLine": "true"}},
    ),
    Case("too many fields", LABELED, labeled("1,Mug,Home,extra,fields", GOOD), {CHOSEN: 1, None: 1}),
    Case("too few fields", LABELED, labeled("1,Mug", GOOD), {CHOSEN: 1, None: 1}),
    Case(
        "CRLF line endings",
        LABELED,
        {"labeled.csv": (LABELED_HEAD + GOOD + "\n").replace("\n", "\r\n").encode()},
        {None: 1},
    ),
    Case("a line of separators only", LABELED, labeled(",,", GOOD), {"empty item_id": 1, None: 1}),
    Case(
        "1 MB title",
        LABELED,
        labeled("1," + "mug " * 262_144 + ",Home > Mugs", GOOD),
        {"title longer than 512 characters": 1, None: 1},
    ),
    # --- empty inputs and header problems
    Case("zero-byte CSV", LABELED, {"labeled.csv": b""}, error=r"empty input: 1 file\(s\), all of 0 bytes"),
    Case("header only", LABELED, labeled(), error=r"no rows to ingest"),
    Case(
        "duplicated column in the header",
        LABELED,
        labeled("1,Mug,Mug,Home", head="item_id,title,title,category\n"),
        error=r"column 'title' appears twice in the header \(column 3\)",
    ),
    Case(
        "missing required column",
        LABELED,
        labeled("1,Home", head="item_id,category\n"),
        error=r"missing required column 'title' for labeled_products",
    ),
    Case(
        "tab-separated file named .csv",
        LABELED,
        {"labeled.csv": b"item_id\ttitle\tcategory\n1\tMug\tHome\n"},
        error=r"one column holding '\\t'",
    ),
    # --- text content
    Case("blank title", LABELED, labeled('1,"   ",Home', GOOD), {"empty title": 1, None: 1}),
    Case("punctuation-only title", LABELED, labeled("1,!!! ???,Home", GOOD), {NO_LETTERS: 1, None: 1}),
    Case("emoji in a title", LABELED, labeled("1,\U0001f389 Party hat,Toys", GOOD), {None: 2}),
    Case("emoji-only title", LABELED, labeled("1,\U0001f389\U0001f389,Toys", GOOD), {NO_LETTERS: 1, None: 1}),
    Case(
        "right-to-left Arabic title",
        LABELED,
        labeled("1,\u0643\u0648\u0628 \u0642\u0647\u0648\u0629,Home", GOOD),
        {None: 2},
    ),
    Case("Hebrew with a right-to-left mark", LABELED, labeled("1,\u05e1\u05e4\u05dc\u200f 2,Home", GOOD), {None: 2}),
    Case("empty item_id", LABELED, labeled(",Blue mug,Home", GOOD), {"empty item_id": 1, None: 1}),
    # --- category paths
    Case("empty level inside a path", LABELED, labeled("1,Mug,Home >> Mugs", GOOD), {EMPTY_LEVEL: 1, None: 1}),
    Case("path starting with a separator", LABELED, labeled("1,Mug,> Home", GOOD), {EMPTY_LEVEL: 1, None: 1}),
    Case("path ending with a separator", LABELED, labeled("1,Mug,Home >", GOOD), {EMPTY_LEVEL: 1, None: 1}),
    Case(
        "path 20 levels deep",
        LABELED,
        labeled("1,Mug," + " > ".join(f"L{i}" for i in range(20)), GOOD),
        {"category deeper than 7 levels": 1, None: 1},
    ),
    Case("empty category", LABELED, labeled("1,Mug,", GOOD), {"empty category": 1, None: 1}),
    # --- counts
    Case("negative count", INTERACTIONS, counts("q,p1,click,-1", "q,p2,click,2"), {"negative count": 1, None: 1}),
    Case("NaN count", INTERACTIONS, counts("q,p1,click,NaN", "q,p2,click,2"), {NOT_INT: 1, None: 1}),
    Case("fractional count", INTERACTIONS, counts("q,p1,click,3.0", "q,p2,click,2"), {NOT_INT: 1, None: 1}),
    Case("exponent count", INTERACTIONS, counts("q,p1,click,1e3", "q,p2,click,2"), {NOT_INT: 1, None: 1}),
    Case(
        "count beyond a long",
        INTERACTIONS,
        counts("q,p1,click,99999999999999999999", "q,p2,click,2"),
        {NOT_INT: 1, None: 1},
    ),
    Case("infinite count", INTERACTIONS, counts("q,p1,click,inf", "q,p2,click,2"), {NOT_INT: 1, None: 1}),
    Case("missing count", INTERACTIONS, counts("q,p1,click,", "q,p2,click,2"), {"missing count": 1, None: 1}),
    Case("padded count", INTERACTIONS, counts("q,p1,click, 4 "), {None: 1}),
    Case("empty interaction", INTERACTIONS, counts("q,p1,,3", "q,p2,click,2"), {"empty interaction": 1, None: 1}),
    # --- Parquet
    Case(
        "truncated Parquet footer",
        LABELED,
        parquet(transform=lambda b: b[:-20], item_id=["1"], title=["Mug"], category=["Home"]),
        error=r"cannot read:.*CANNOT_READ_FILE_FOOTER",
    ),
    Case("zero-byte Parquet", LABELED, {"data.parquet": b""}, error=r"empty input"),
    Case(
        "CSV text named .parquet",
        LABELED,
        {"data.parquet": (LABELED_HEAD + GOOD).encode()},
        error=r"cannot read:.*not a Parquet file",
    ),
    Case(
        "duplicated Parquet column",
        LABELED,
        parquet(item_id=["1"], title=["a"], title_=["b"], category=["Home"]),
        error=r"cannot read:.*COLUMN_ALREADY_EXISTS.*title",
    ),
    Case(
        "count stored as double with NaN",
        INTERACTIONS,
        parquet(query=["q"], product_id=["p"], interaction=["click"], count=[float("nan")]),
        error=r"column 'count' has type double, expected long",
    ),
    Case(
        "title stored as binary",
        LABELED,
        parquet(item_id=["1"], title=[b"Mug"], category=["Home"]),
        error=r"column 'title' has type binary, expected string",
    ),
    Case(
        "negative count in Parquet",
        INTERACTIONS,
        parquet(query=["q", "q"], product_id=["p", "r"], interaction=["click"] * 2, count=[-5, 5]),
        {"negative count": 1, None: 1},
    ),
    Case(
        "null title in Parquet",
        LABELED,
        parquet(item_id=["1", "2"], title=[None, "Mug"], category=["Home"] * 2),
        {"empty title": 1, None: 1},
    ),
    Case(
        "one truncated file in a folder",
        LABELED,
        lambda folder: (
            parquet("a.parquet", item_id=["1"], title=["Mug"], category=["Home"])(folder),
            parquet("b.parquet", transform=lambda b: b[:-20], item_id=["2"], title=["Pan"], category=["Home"])(folder),
        ),
        error=r"cannot read:.*b\.parquet",
        path=".",
    ),
    # --- JSON lines
    Case(
        "truncated JSON line",
        CATALOG,
        jsonl('{"item_id": "a", "title": "Blue mug"}', '{"item_id": "b", "title": '),
        {None: 1, MALFORMED: 1},
    ),
    Case(
        "title as a JSON array",
        CATALOG,
        jsonl('{"item_id": "a", "title": ["Blue", "mug"]}'),
        error=r"column 'title' has type array<string>, expected string",
    ),
    Case(
        "BOM before JSON lines",
        CATALOG,
        {"catalog.jsonl": b"\xef\xbb\xbf" + b'{"item_id": "a", "title": "Mug"}\n'},
        {None: 1},
    ),
    Case(
        "duplicated JSON key",
        CATALOG,
        jsonl('{"item_id": "a", "title": "x", "title": "y"}'),
        error=r"cannot read:.*COLUMN_ALREADY_EXISTS",
    ),
    Case(
        "plain text named .jsonl",
        CATALOG,
        jsonl("hello world", "not json"),
        error=r"missing required column 'item_id'.*no line of it parses as a JSON object",
    ),
    Case(
        "null and numeric titles",
        CATALOG,
        jsonl('{"item_id": "a", "title": null}', '{"item_id": "b", "title": 123}'),
        {"empty title": 1, None: 1},
    ),
    # --- labels
    Case(
        "unknown split",
        TEXTS,
        {"texts.csv": b"text,label,split\ngreat film,pos,validation\nbad film,neg,train\n"},
        {"unknown split (allowed: train, dev, test)": 1, None: 1},
    ),
    Case("empty label", TEXTS, {"texts.csv": b"text,label\ngreat film,\nbad film,neg\n"}, {"empty label": 1, None: 1}),
    Case(
        "unknown label",
        MULTILABEL,
        {"ml.csv": b"text,labels\nso happy,joy\nso scared,fear|dread\n"},
        {"unknown label (not in ingest.label_vocabulary)": 1, None: 1},
        ingest={"label_vocabulary": ["joy", "fear"], "label_separator": "|"},
    ),
    Case("no labels", MULTILABEL, {"ml.csv": b"text,labels\nso happy,joy\nnothing,\n"}, {"no labels": 1, None: 1}),
    Case(
        "indicator column not 0/1",
        MULTILABEL,
        {"ml.csv": b"text,joy,fear\nso happy,1,0\nhm,2,yes\n"},
        {"label column joy is not 0/1": 1, None: 1},
        spec={"label_columns": ["joy", "fear"]},
    ),
    Case(
        "indicator column missing",
        MULTILABEL,
        {"ml.csv": b"text,joy\nso happy,1\n"},
        error=r"label column 'fear' \(inputs.multilabel.label_columns\) not found",
        spec={"label_columns": ["joy", "fear"]},
    ),
    # --- paths
    Case("path that does not exist", LABELED, {}, error=r"input not found", path="nope.csv"),
    Case("unknown suffix", LABELED, {"labeled.xlsx": b"PK\x03\x04"}, error=r"unknown file suffix '.xlsx'"),
    Case("glob matching nothing", LABELED, {}, error=r"no file matches", path="*.csv"),
    Case(
        "folder of mixed formats",
        LABELED,
        {"a.csv": (LABELED_HEAD + GOOD).encode(), "b.jsonl": b"{}\n"},
        error=r"cannot tell the format of this folder",
        path=".",
    ),
    Case("corrupt Delta log", LABELED, lambda folder: _corrupt_delta(folder), error=r"cannot read", path="table"),
]


def _corrupt_delta(folder):
    """A Delta table whose only commit file is cut in half."""
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(folder / "table"), pa.table({"item_id": ["1"], "title": ["Mug"], "category": ["Home"]}))
    log = folder / "table" / "_delta_log" / "00000000000000000000.json"
    log.write_bytes(log.read_bytes()[: len(log.read_bytes()) // 2])


def outcome(spark, folder, case: Case, taxonomy=None) -> Union[dict, str]:
    """{reason: rows} of ``case`` after checking rows in = kept + quarantined, or its one-line error."""
    folder.mkdir(parents=True, exist_ok=True)
    if callable(case.files):
        case.files(folder)
    else:
        for name, content in case.files.items():
            (folder / name).write_bytes(content)
    target = case.path or (next(iter(case.files)) if isinstance(case.files, dict) else "data.parquet")
    cfg = IngestConfig(**case.ingest)
    try:
        raw = read_input(
            spark,
            InputSpec(path=str(folder / target), **case.spec),
            case.contract,
            label_separator=cfg.label_separator,
        )
        validated = with_reasons(raw.df, case.contract, cfg, taxonomy, malformed=raw.malformed).cache()
        by_reason = reason_counts(validated, raw.location)
    except InputError as exc:
        return str(exc)
    n_kept, n_rejected = kept(validated, case.contract, cfg).count(), rejected(validated, case.contract).count()
    assert (n_kept, n_rejected) == (by_reason.get(None, 0), sum(v for k, v in by_reason.items() if k is not None))
    assert all(r.reason and r.source for r in rejected(validated, case.contract).collect())
    validated.unpersist()
    return by_reason


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_quarantined_or_refused_in_one_line(spark, tmp_path, case):
    result = outcome(spark, tmp_path / "in", case)
    if case.error:
        assert isinstance(result, str), f"expected an error, got rows {result}"
        assert "\n" not in result and len(result) < 700 and "Traceback" not in result
        target = case.path or (next(iter(case.files)) if isinstance(case.files, dict) else "data.parquet")
        assert str(tmp_path / "in" / target).removesuffix("/.") in result  # names the input
        assert re.search(case.error, result), result
    else:
        assert result == case.reasons


def test_unknown_category_is_quarantined_against_the_taxonomy(spark, tmp_path):
    taxonomy = spark.createDataFrame([("Home",), ("Home > Mugs",)], "path string")
    case = Case("unknown category", LABELED, labeled("1,Cap,Home > Hats", GOOD))
    assert outcome(spark, tmp_path, case, taxonomy) == {"category not in taxonomy": 1, None: 1}


def test_the_corpus_holds_at_least_fifty_inputs():
    assert len(CASES) + 1 >= 50  # + the taxonomy case; the property tests add their generated files


# --- property-based: any text a standard CSV/JSON writer can write is kept or quarantined, never lost
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
ROWS = st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=25)
PROPERTY = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _accounted(spark, folder, name: str, content: bytes, contract: Contract, n: int, **spec) -> dict:
    case = Case(name, contract, {name: content}, spec=spec)
    result = outcome(spark, folder, case)
    assert isinstance(result, dict), result
    assert sum(result.values()) == n  # every written row is kept or quarantined, none lost or split
    return result


@PROPERTY
@given(rows=ROWS)
def test_any_csv_a_writer_produces_is_accounted_for(spark, tmp_path_factory, rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["item_id", "title", "category"])
    writer.writerows((f"id{i}", title, category) for i, (title, category) in enumerate(rows))
    result = _accounted(
        spark, tmp_path_factory.mktemp("csv"), "labeled.csv", out.getvalue().encode(), LABELED, len(rows)
    )
    assert not {RECORD, LINE, CHOSEN} & set(result)  # a well-formed file is read record by record, every record parsed


@PROPERTY
@given(rows=ROWS, counts=st.lists(st.one_of(st.integers(), st.floats(), TEXT), min_size=25, max_size=25))
def test_any_json_lines_file_is_accounted_for(spark, tmp_path_factory, rows, counts):
    lines = [
        json.dumps({"query": title, "product_id": f"p{i}", "interaction": category or "click", "count": counts[i]})
        for i, (title, category) in enumerate(rows)
    ]
    result = _accounted(
        spark,
        tmp_path_factory.mktemp("json"),
        "interactions.jsonl",
        ("\n".join(lines) + "\n").encode(),
        INTERACTIONS,
        len(rows),
    )
    assert MALFORMED not in result


# --- through the `augment` command: bad config and bad input end in one line and an exit code, no traceback
def _augment(tmp_path, *args: str):
    import subprocess
    import sys
    from pathlib import Path

    augment = Path(sys.executable).parent / "augment"
    settings_ = ["--set", f"lakehouse.root={tmp_path / 'lh'}", "--set", f"tracking.uri=sqlite:///{tmp_path / 'ml.db'}"]
    done = subprocess.run([str(augment), *args, *settings_], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["config", "--set", "spark.no_such_key=1"], 2, r"config error: .*spark\.no_such_key"),
        (["config", "--set", "spark.shuffle_partitions=many"], 2, r"config error: spark\.shuffle_partitions"),
        (["config", "--set", "ray.actor_max_restarts=-5"], 2, r"config error: ray\.actor_max_restarts: must be >= -1"),
        (["config", "--conf", "broken.yaml"], 2, r"config error: .*broken\.yaml"),
    ],
    ids=["unknown key", "wrong type", "out of range", "YAML syntax error"],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path, args, code, message):
    (tmp_path / "broken.yaml").write_text("spark:\n  master: [local\n")
    returncode, stderr = _augment(tmp_path, *args)
    assert returncode == code and "Traceback" not in stderr, stderr
    assert re.search(message, stderr.strip().splitlines()[-1]), stderr


def test_a_job_with_a_missing_input_or_a_broken_file_fails_in_one_line(tmp_path):
    """A required input left unset (exit 2), for a job and for a pipeline whose first job needs it, fails
    before any engine starts (no MLflow database, no lakehouse); a truncated Parquet file (exit 3) starts Spark
    (about 20 s)."""
    for name, key in (("ingest-documents", "inputs.documents"), ("compositional", "inputs.multilabel")):
        returncode, stderr = _augment(tmp_path, "run", name)
        assert returncode == 2 and "Traceback" not in stderr, stderr
        assert stderr.strip().splitlines()[-1].startswith(f"augment: config error: nothing to ingest: set {key}")
        assert not (tmp_path / "ml.db").exists() and not (tmp_path / "lh").exists(), name
    (tmp_path / "data").mkdir()
    parquet(transform=lambda b: b[:-20], doc_id=["d"], text=["A text."], genre=["news"])(tmp_path / "data")
    returncode, stderr = _augment(
        tmp_path, "run", "ingest-documents", "--set", f"inputs.documents.path={tmp_path / 'data' / 'data.parquet'}"
    )
    assert returncode == 3 and "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("augment: input error: ") and "data.parquet: cannot read" in last, last
