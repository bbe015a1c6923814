"""The layout's rules, checked on the source (ast), so they keep holding as code is added.

Dependencies point one way: ``jobs -> common.config -> registry/stages -> method packages -> models ->
data/algorithms -> platform``. A method package never imports another method package; transforms (method packages
and algorithms) never import the session factory, the lakehouse or the job runner. The model layer never imports the
runner, the lakehouse or tracking: the stages above it (``common.stages``) join a model to a job's run and tables.
Inside ``common.models`` the generation and classifier halves never import each other, and the modules both build on
(config, pretrained weights, optimiser) import neither. Every folder holds one concept in at most a dozen modules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Every package under common/ has a layer; a new package must be placed here (the test says so).
LAYERS = {
    "common.platform": 0,
    "common.pyfunc": 0,
    "common.data": 1,
    "common.algorithms": 1,
    "common.evaluation": 1,
    "common.models": 2,
    "common.catalog": 3,
    "common.querygraph": 3,
    "common.boostaug": 3,
    "common.compositional": 3,
    "common.genre": 3,
    "common.registry": 4,
    "common.stages": 4,
    "common.config": 5,
    "jobs": 6,
}
METHOD_LAYER = 3
# What a transform module must not reach: sessions, tables, runs.
PURE_PACKAGES = {"common.algorithms", "common.evaluation"}
TRANSFORM_PACKAGES = PURE_PACKAGES | {p for p, rank in LAYERS.items() if rank == METHOD_LAYER}
IO_MODULES = (
    "common.platform.compute.session",
    "common.platform.lakehouse",
    "common.platform.runner",
    "common.platform.tracking",
)
# What the model layer must not reach: a job's run, the lakehouse, tracking (the stages above it do).
MODEL_LAYER_FORBIDS = ("common.platform.runner", "common.platform.lakehouse", "common.platform.tracking")
# A folder of more modules than this holds more than one concept; give each its own folder.
MAX_MODULES_PER_FOLDER = 12
# A module over 360 lines (formatted by ruff) holds more than one responsibility; split it by what it does.
MAX_LINES = 360
# common.models' halves, and the shared modules under them.
MODEL_HALVES = ("common.models.generation", "common.models.classifiers")
MODEL_BASE = (
    "common.models.config",
    "common.models.classifier_config",
    "common.models.generator_summary",
    "common.models.optim",
    "common.models.pretrained",
)


def package_of(module: str) -> str | None:
    """The layered package a dotted module name belongs to (None for third-party modules)."""
    if module == "common" or module == "common.config":
        return module if module == "common.config" else None
    parts = module.split(".")
    if parts[0] == "jobs":
        return "jobs"
    if parts[0] == "common" and len(parts) >= 2:
        return ".".join(parts[:2])
    return None


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in ``source`` (top level, in functions, under TYPE_CHECKING);
    ``from pkg import name`` counts as ``pkg.name`` when that is a submodule."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.rsplit(".", node.level)[0]
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found += [
                (node.lineno, f"{target}.{alias.name}")
                if (ROOT / Path(*f"{target}.{alias.name}".split("."))).with_suffix(".py").exists()
                else (node.lineno, target)
                for alias in node.names
            ]
    return found


def violations(module: str, source: str) -> list[str]:
    """The rule breaks of one module's imports, as readable lines."""
    own = package_of(module)
    if own is None:
        return []
    if own not in LAYERS:
        return [f"{module}: package {own} has no layer; add it to LAYERS in tests/test_architecture.py"]
    problems = []
    for line, target in imported_modules(source, module):
        problems += model_violations(module, line, target)
        other = package_of(target)
        if other is None or other == own:
            continue
        if other not in LAYERS:
            problems.append(f"{module}:{line} imports {target}: package {other} has no layer")
        elif LAYERS[other] > LAYERS[own]:
            problems.append(
                f"{module}:{line} imports {target}: {own} (layer {LAYERS[own]}) may not depend on "
                f"{other} (layer {LAYERS[other]})"
            )
        elif LAYERS[other] == LAYERS[own] and own.startswith("common."):
            problems.append(
                f"{module}:{line} imports {target}: {own} and {other} are peers; a method or shared "
                "package never imports another"
            )
        if module.startswith("common.models.") and _under(target, MODEL_LAYER_FORBIDS):
            problems.append(
                f"{module}:{line} imports {target}: the model layer never imports the runner, the lakehouse or "
                "tracking (a stage in common.stages joins them)"
            )
        if own in TRANSFORM_PACKAGES and _under(target, IO_MODULES):
            problems.append(
                f"{module}:{line} imports {target}: transforms never import the session factory, "
                "the lakehouse or the job runner"
            )
    return problems


def _under(module: str, packages: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one of them."""
    return any(module == package or module.startswith(package + ".") for package in packages)


def model_half(module: str) -> str | None:
    """The half of ``common.models`` a module belongs to ("base" for the shared modules, None outside)."""
    if module.startswith(MODEL_BASE):
        return "base"
    return next((half for half in MODEL_HALVES if module == half or module.startswith(half + ".")), None)


def model_violations(module: str, line: int, target: str) -> list[str]:
    """The break, if any, of one import between common.models' halves."""
    own, other = model_half(module), model_half(target)
    if own is None or other is None or own == other or other == "base":
        return []
    if own == "base":
        return [f"{module}:{line} imports {target}: the shared model modules import neither half"]
    return [
        f"{module}:{line} imports {target}: {own} and {other} are the two halves of common.models; neither "
        "imports the other"
    ]


def source_modules() -> dict[str, Path]:
    """Every module of ``common`` and ``jobs`` by dotted name."""
    modules = {}
    for path in sorted([*ROOT.glob("common/**/*.py"), *ROOT.glob("jobs/**/*.py")]):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def test_imports_point_one_way():
    problems = [p for name, path in source_modules().items() for p in violations(name, path.read_text())]
    assert not problems, "\n".join(problems)


def test_every_package_has_a_layer_and_the_layout_is_there():
    packages = {package_of(name) for name in source_modules()} - {None}
    assert packages <= set(LAYERS), packages - set(LAYERS)
    for package in (
        "common.platform",
        "common.data",
        "common.models",
        "common.algorithms",
        "common.catalog",
        "common.querygraph",
    ):
        assert package in packages
    for half in MODEL_HALVES:
        assert half in source_modules(), half
    # Each domain owns its config section classes.
    for domain in ("platform", "data", "models", "catalog", "querygraph"):
        assert (ROOT / "common" / domain / "config.py").is_file()


@pytest.mark.parametrize(
    "module, source, expected",
    [
        ("common.platform.compute.session", "from common.catalog.grouping import group_items\n", "may not depend on"),
        (
            "common.data.readers",
            "def f():\n    from common.models.classifiers.hft import predict\n",
            "may not depend on",
        ),
        ("common.catalog.cga", "from common.querygraph.matcher import evaluate\n", "are peers"),
        (
            "common.querygraph.clusters",
            "from common.platform.lakehouse.lakehouse import Lakehouse\n",
            "transforms never",
        ),
        ("common.algorithms.graph", "from common.platform.compute import session\n", "transforms never"),
        (
            "common.querygraph.clusters",
            "from common.platform.lakehouse.ray_io import RayHandoff\n",
            "transforms never",
        ),
        ("common.evaluation.paired", "from common.platform.tracking.status import check_server\n", "transforms never"),
        ("common.newpaper.core", "import os\n", "has no layer"),
        ("common.models.classifiers.hft", "from common.models.generation.engines.ct2 import convert\n", "two halves"),
        (
            "common.models.generation.on_ray.pool",
            "def f():\n    from common.models.classifiers import hft\n",
            "two halves",
        ),
        (
            "common.models.config",
            "from common.models.generation.kinds.batching import padded\n",
            "import neither half",
        ),
        ("common.models.generation.on_ray.pool", "from common.platform.runner.job import JobContext\n", "model layer"),
        (
            "common.models.classifiers.hft",
            "def f():\n    from common.platform.tracking.tracker import TrackedRun\n",
            "model layer",
        ),
        ("common.models.generation.served.log", "from common.platform.lakehouse import tables\n", "model layer"),
    ],
)
def test_the_checker_catches_wrong_arrows(module, source, expected):
    assert any(expected in p for p in violations(module, source))


def test_the_checker_accepts_arrows_the_right_way():
    assert (
        violations("jobs.cga.cga", "from common.catalog.cga import augmentation_set\nfrom jobs import entry_point\n")
        == []
    )
    assert (
        violations(
            "common.catalog.grouping",
            "from common.algorithms.graph import connected_components\nfrom common.platform.config import check\n",
        )
        == []
    )
    assert (
        violations(
            "common.models.generation.kinds.seq2seq",
            "from common.models.pretrained import load_for_training\n"
            "from common.models.generation.kinds.batching import "
            "padded\n",
        )
        == []
    )


def test_a_stage_may_join_a_model_to_a_run_and_its_tables():
    assert (
        violations(
            "common.stages.generation",
            "from common.models.generation.on_ray.pool import generate\n"
            "from common.platform.runner.job import JobContext\n"
            "from common.platform.lakehouse.lakehouse import Lineage\n",
        )
        == []
    )


def test_no_module_is_over_the_size_limit():
    long = {
        name: n for name, path in source_modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_cluster_harness_modules_are_under_the_size_limit():
    """tests/cluster/: the local cluster's harness, one module per part (processes, layout, lifecycle, observation,
    the S3 gateway, the model server, the rounds), none over the limit (one 1,157-line file until 2026-12-05)."""
    long = {
        path.name: n
        for path in sorted((ROOT / "tests" / "cluster").glob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"tests/cluster modules over {MAX_LINES} lines: {long}"


def import_graph(modules: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the suite's modules it imports (anywhere in the file, lazy imports included), from sources
    by dotted name; an import of a name inside a module counts as that module."""
    graph = {}
    for name, source in modules.items():
        deps = set()
        for _, target in imported_modules(source, name):
            parts = target.split(".")
            while parts and ".".join(parts) not in modules:
                parts = parts[:-1]
            if parts and ".".join(parts) != name:
                deps.add(".".join(parts))
        graph[name] = deps
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative): each is a
    set of modules that import each other, directly or around a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circles():
    """No two modules import each other, directly or around a loop, even lazily inside a function: a circle
    means neither can be understood, tested or moved alone."""
    graph = import_graph({name: path.read_text() for name, path in source_modules().items()})
    assert not import_circles(graph), import_circles(graph)


def test_no_import_circles_among_the_scripts():
    """The scripts of ``benchmarks/`` and the helpers of ``tests/`` import each other by their file names (each
    folder is on its own path): no circle there either (``gpu_stage`` and ``gpu_box`` shared one until 2026-12-05)."""
    folders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "benchmarks").iterdir()) if path.is_dir()]
    assert "benchmarks/gpu" in folders, folders
    for folder in (*folders, "tests", "tests/reliability", "tests/cluster"):
        scripts = {path.stem: path.read_text() for path in sorted((ROOT / folder).glob("*.py"))}
        graph = {
            name: {
                target.split(".")[0]
                for _, target in imported_modules(source, name)
                if target.split(".")[0] in scripts and target.split(".")[0] != name
            }
            for name, source in scripts.items()
        }
        assert not import_circles(graph), (folder, import_circles(graph))


def test_the_circle_finder_finds_circles():
    graph = import_graph(
        {
            "common.models.a": "from common.models.b import x\n",
            "common.models.b": "def f():\n    from common.models.c import y\n",
            "common.models.c": "import common.models.a\n",
            "common.models.d": "from common.models.a import z\n",
        }
    )
    assert import_circles(graph) == [["common.models.a", "common.models.b", "common.models.c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_the_code_a_registered_model_carries_is_self_contained():
    """common.pyfunc ships inside every registered model under another top-level name: it may import its own
    modules (relatively) and the standard library, numpy, pandas, fastText and MLflow, and for the encoder kinds
    torch, transformers and safetensors (the pip requirements those models pin), nothing else."""
    allowed = {"numpy", "pandas", "fasttext", "mlflow", "__future__", "torch", "transformers", "safetensors"}
    problems = []
    for name, path in source_modules().items():
        if not name.startswith("common.pyfunc"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue
            roots = (
                [a.name.split(".")[0] for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module.split(".")[0]]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            problems += [
                f"{name}:{node.lineno} imports {root}"
                for root in roots
                if root not in allowed and root not in sys.stdlib_module_names
            ]
    assert not problems, "\n".join(problems)


def folder_modules() -> dict[str, list[str]]:
    """Each folder of ``common``, ``jobs`` and ``benchmarks`` -> the modules (or scripts) in it, ``__init__`` left
    out."""
    folders: dict[str, list[str]] = {}
    for path in sorted([*ROOT.glob("common/**/*.py"), *ROOT.glob("jobs/**/*.py"), *ROOT.glob("benchmarks/**/*.py")]):
        if path.name != "__init__.py":
            folders.setdefault(str(path.parent.relative_to(ROOT)), []).append(path.stem)
    return folders


def test_every_folder_holds_at_most_a_dozen_modules():
    """A folder is one concept a newcomer can read in one sitting: at most a dozen modules (``common/platform`` was 42
    modules on 13 internal floors until 2026-12-07, ``common/models/generation`` 25, ``jobs`` 37, ``benchmarks``
    30)."""
    crowded = {folder: len(names) for folder, names in folder_modules().items() if len(names) > MAX_MODULES_PER_FOLDER}
    assert not crowded, f"folders over {MAX_MODULES_PER_FOLDER} modules: {crowded}"


def test_the_platform_keeps_only_what_all_of_it_uses_at_its_root():
    """``common/platform``'s root holds config, config loading, errors and storage; everything else is in a folder of
    its concept (process, compute, lakehouse, tracking, reports, doctor, runner)."""
    root = set(folder_modules()["common/platform"])
    assert root == {"base_config", "config", "config_loader", "config_reference", "errors", "storage"}, root
    for concept in ("process", "compute", "lakehouse", "tracking", "reports", "doctor", "runner"):
        assert (ROOT / "common" / "platform" / concept / "__init__.py").is_file(), concept


def test_each_job_family_has_a_package_with_the_module_that_chains_it():
    """``jobs/<family>/`` per pipeline family, each with the module that runs the family's jobs in order for
    ``spark-submit`` (``query`` has two: the graph's and the reformulation's); only the registry, the CLI and the
    notebook helper stay at ``jobs/``'s root."""
    chains = {
        "foundation": "foundation",
        "consistency": "consistency",
        "cga": "cga",
        "query": "query_reformulation",
        "boostaug": "boostaug",
        "genre": "genre",
        "compositional": "compositional",
        "summary": "summary",
    }
    for family, chain in chains.items():
        assert "main = entry_point(" in (ROOT / "jobs" / family / f"{chain}.py").read_text(), family
    assert sorted(p.name for p in (ROOT / "jobs").glob("*.py")) == ["__init__.py", "cli.py", "notebook.py"]
