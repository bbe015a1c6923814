"""The documentation: README.md is a short front door, and the MkDocs site in docs/ builds with --strict
(a broken link, a missing page or an unknown anchor fails it), with a page for each method pipeline."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# Pipelines that chain other pipelines' jobs or keep the tables: documented on other pages.
NOT_METHODS = {"foundation", "maintenance", "demo"}


def _nav_pages(node) -> list[str]:
    """Every page path in mkdocs.yml's nav (nested lists of {title: page or list})."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    return [p for value in node.values() for p in _nav_pages(value)]


def _mkdocs_config() -> dict:
    # mkdocs.yml names a Python function for the Mermaid fence (a !!python/name tag): skip such tags here.
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


def test_readme_is_a_short_front_door_whose_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, f"README links to missing docs pages: {missing}"
    # The front door names both commands and the test command CI runs.
    assert "make demo" in text and "make test" in text


def test_readme_figures_next_to_a_results_page_come_from_that_page():
    """A README row that links a results page written by a run quotes that page's numbers (decimals and counts),
    digit for digit."""
    rows = [
        line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines() if "](docs/results/" in line
    ]
    assert rows, "the README's pipeline table links no results page"
    for row in rows:
        page = (ROOT / re.search(r"\]\((docs/results/[^)]+\.md)\)", row).group(1)).read_text(encoding="utf-8")
        # decimals, counts like 3,490, and counts of two digits or more standing alone (not P@10, SemEval-2018)
        numbers = re.findall(r"\d+\.\d+|\d{1,3}(?:,\d{3})+|(?<![\w@.,-])\d{2,}(?![\w.,%-])", row)
        assert numbers and all(n in page for n in numbers), (row, [n for n in numbers if n not in page])


def test_every_method_pipeline_has_a_page_in_the_nav():
    from jobs import PIPELINES

    nav = set(_nav_pages(_mkdocs_config()["nav"]))
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert nav == on_disk, f"pages not in the nav: {on_disk - nav}; nav entries with no file: {nav - on_disk}"
    methods = sorted(set(PIPELINES) - NOT_METHODS)
    assert len(methods) == 7
    assert {f"pipelines/{name}.md" for name in methods} <= nav


def test_site_builds_offline_with_strict(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for page in ("index.html", "pipelines/cga/index.html", "history/index.html", "search/search_index.json"):
        assert (tmp_path / "site" / page).is_file(), page


def test_config_reference_covers_every_key_and_is_the_generated_page():
    from common.config import AppConfig
    from common.platform.config_reference import markdown, reference

    rows = reference(AppConfig())
    assert len(rows) > 500 and len({r.key for r in rows}) == len(rows)
    undescribed = [r.key for r in rows if not r.description]
    assert not undescribed, f"config keys without a description (a comment on the field): {undescribed}"
    page = (ROOT / "docs" / "reference" / "config-keys.md").read_text(encoding="utf-8")
    assert page == markdown(rows), "docs/reference/config-keys.md is stale: augment config --reference > it"
    by_key = {r.key: r for r in rows}
    # Defaults are the built-in ones, per section (the infiller's own fine-tune, not the class default).
    assert by_key["boostaug.contextual.fine_tune.learning_rate"].default == "0.0001"
    assert by_key["lakehouse.root"].default == '"./lakehouse"'
    assert by_key["cga.generation.engine"].type == "hf | ctranslate2"


def test_field_comments_read_the_lines_above_and_the_trailing_comment():
    from dataclasses import dataclass
    from typing import Optional

    from common.platform.config_reference import field_comments, type_name

    @dataclass
    class Example:
        # Two lines
        # above.
        a: int = 1
        b: str = "#not a comment"  # after it
        c: Optional[float] = None

    assert field_comments(Example) == {"a": "Two lines above.", "b": "after it", "c": ""}
    assert type_name(Optional[float]) == "float | null" and type_name(list[str]) == "list[str]"


def test_augment_config_reference_prints_the_built_in_defaults_whatever_the_conf(capsys, monkeypatch):
    from jobs.cli import main

    monkeypatch.chdir(ROOT)
    assert main(["config", "--reference", "--conf", "conf/demo.yaml"]) == 0
    printed = capsys.readouterr().out
    assert printed == (ROOT / "docs" / "reference" / "config-keys.md").read_text(encoding="utf-8")
    assert "| `demo.n_labeled` | int | `6000` |" in printed  # conf/demo.yaml's 1000 is not the default
