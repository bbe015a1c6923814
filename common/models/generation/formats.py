"""What every generation engine agrees on, the local ones (hf, CTranslate2) and the served one alike: the saved
generator's settings file, the in-context stop, how a prompt template takes its source, and the generated rows'
columns and Arrow schema. Kept here, with no engine's imports, so the served engine loads neither torch nor an
engine it does not run."""

from __future__ import annotations

# A causal or served generator's settings, beside its weights (or alone, for a served model).
GENERATOR_FILE = "generator.json"
# An in-context sample ends at the line break after it: each example of a few-shot prompt is one line.
STOP = "\n"
# The generated rows of every engine, in this order.
OUTPUT_COLUMNS = (
    "source_id",
    "source_text",
    "generated_text",
    "sample_idx",
    "model_version",
    "generated_tokens",
    "reason",
)


def prompt_text(template: str, source: str) -> str:
    """The prompt for ``source``: the template's ``{source}`` filled in."""
    return template.replace("{source}", source)


def output_schema():
    """The explicit Arrow schema of generated rows: all-null columns would otherwise be typed ``null``,
    which Delta stores as ``void`` and Spark cannot read."""
    import pyarrow as pa

    return pa.schema(
        [
            ("source_id", pa.string()),
            ("source_text", pa.string()),
            ("generated_text", pa.string()),
            ("sample_idx", pa.int64()),
            ("model_version", pa.string()),
            ("generated_tokens", pa.int64()),
            ("reason", pa.string()),
        ]
    )
