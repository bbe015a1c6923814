"""The config reference: every key of a config dataclass tree with its type, default and description.

The description of a field is the comment written with it in its dataclass: the ``#`` lines right above the
field, then a comment trailing it on its line (the code's own convention for saying why a default is what
it is). ``augment config --reference`` prints the Markdown page ``docs/reference/config-keys.md`` holds; a
test fails when a key has no description or when that page is not what the classes give.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KeyDoc:
    """One config key: its dotted name, type, built-in default (as YAML/JSON text) and description."""

    key: str
    type: str
    default: str
    description: str


@functools.lru_cache(maxsize=None)
def field_comments(cls: type) -> dict[str, str]:
    """``field name -> description`` from the comments of ``cls``'s own body (not its bases')."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # a class built at run time has no source
        return {}
    lines = source.splitlines()
    out = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above, j = [], node.lineno - 2
        while j >= 0 and lines[j].strip().startswith("#"):
            above.insert(0, lines[j].strip().lstrip("#").strip())
            j -= 1
        last = lines[node.end_lineno - 1]
        trailing = [_trailing_comment(last)] if _trailing_comment(last) else []
        out[node.target.id] = " ".join(above + trailing).strip()
    return out


def _trailing_comment(line: str) -> str:
    """The comment that ends a line of code, outside string literals ('' when there is none)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[i + 1 :].strip()
    return ""


def _descriptions(cls: type) -> dict[str, str]:
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base):
            docs.update({k: v for k, v in field_comments(base).items() if v})
    return docs


def type_name(annotation: Any) -> str:
    """A short, readable name of a field's type: ``int``, ``float | null``, ``hf | ctranslate2``, ``list[str]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def reference(config: Any, prefix: str = "") -> list[KeyDoc]:
    """The keys of the dataclass instance ``config`` (its values are the defaults shown), depth first in
    field order; a nested dataclass field is a section, not a key."""
    cls = type(config)
    hints = typing.get_type_hints(cls)
    docs = _descriptions(cls)
    rows: list[KeyDoc] = []
    for f in dataclasses.fields(cls):
        value = getattr(config, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            rows.extend(reference(value, key + "."))
            continue
        if isinstance(f.default, str) and value != f.default and value == str(Path(f.default).expanduser().resolve()):
            value = f.default  # validation made a relative path absolute here: show the default as written
        default = json.dumps(value, default=str)
        rows.append(KeyDoc(key, type_name(hints[f.name]), default, docs.get(f.name, "")))
    return rows


def markdown(rows: list[KeyDoc], title: str = "Config keys") -> str:
    """The reference page: one table per top-level section."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    out = [
        f"# {title}",
        "",
        "Every key of the suite's config, with its type, its built-in default and what it means; generated from",
        "the config dataclasses by `augment config --reference` (a test keeps this page equal to that output).",
        "Configs in `conf/` override these defaults; `--set KEY=VALUE` overrides a config.",
        "",
    ]
    section = None
    for row in rows:
        top = row.key.split(".", 1)[0] if "." in row.key else "(top level)"
        if top != section:
            section = top
            out += ["", f"## {section}", "", "| key | type | default | description |", "|---|---|---|---|"]
        out.append(f"| `{row.key}` | {cell(row.type)} | `{cell(row.default)}` | {cell(row.description)} |")
    return "\n".join(out).strip() + "\n"
