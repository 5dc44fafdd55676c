"""The package dependency direction of DESIGN.md, and the product apart from the demo factory.

`tessera -> api, console, bench -> serving, tenancy, billing, grounding, storage, jobs -> db, config`. Serving
defines the caller policy, the grounding gate, the completion record and the engine interface; tenancy and grounding
implement and subscribe to them, so they may import serving, never the reverse. The HTTP surface reaches data only
through the domain packages. Console may use api's shared pieces (the chat path, auth, the error mapper); api never
imports console. No product package imports `demo/`: what the runtime needs from a demo checkpoint travels as files
beside it. Only the composition root's command line and the benchmarks (which build demo checkpoints to measure on)
may. Within grounding, the offline eval (`grounding/eval/`) imports the runtime, never the reverse."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("tessera", "config", "api", "console", "serving", "tenancy", "billing", "grounding", "storage", "jobs", "db")
# Each package's level: a package imports only packages on a lower level (or its own), never one above or beside
# it, unless ALLOWED_SIDEWAYS says so.
LEVEL = {
    "tessera": 4,
    "api": 3,
    "console": 3,
    "bench": 3,
    "serving": 2,
    "tenancy": 2,
    "billing": 2,
    "grounding": 2,
    "storage": 2,
    "jobs": 2,
    "db": 1,
    "config": 0,
}
ALLOWED_SIDEWAYS = {
    "console": {"api"},  # the playground runs the chat path; sign-in uses api's authenticator and error mapper
    "tenancy": {"serving", "billing"},  # implements serving's caller policy; prices its usage with billing's book
    "grounding": {"serving"},  # subscribes to serving's completion records; reads what the towers detected
    "storage": {"serving"},  # refuses with serving's typed errors
    "jobs": {"serving", "tenancy", "billing", "grounding", "storage"},  # runs work through the same lease
}
# The HTTP surface and the console reach data only through the domain packages, never the tables themselves.
NOT_DIRECTLY = {"api": {"db"}, "console": {"db"}}
# The demo factory may be imported only by the command line's wiring and by the benchmarks.
DEMO_IMPORTERS = {"tessera/cli.py", "bench"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _upward(package: str, imported: str) -> bool:
    if imported in NOT_DIRECTLY.get(package, set()):
        return True
    if imported == package or imported not in LEVEL:
        return False
    return LEVEL[imported] >= LEVEL[package] and imported not in ALLOWED_SIDEWAYS.get(package, set())


@pytest.mark.parametrize("package", sorted(LEVEL))
def test_no_imports_against_the_direction(package):
    root = REPO / package
    if not root.is_dir():
        pytest.skip(f"{package}/ does not exist yet")
    offenders = {
        str(path.relative_to(REPO)): sorted(m for m in _imports(path) if _upward(package, m))
        for path in root.rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize("package", [*PRODUCT, "bench"])
def test_only_the_command_line_and_the_benches_import_the_demo_factory(package):
    root = REPO / package
    if not root.is_dir():
        pytest.skip(f"{package}/ does not exist yet")
    offenders = [
        str(rel)
        for path in root.rglob("*.py")
        if "demo" in _imports(path) and not {str(rel := path.relative_to(REPO)), rel.parts[0]} & DEMO_IMPORTERS
    ]
    assert offenders == []


def test_the_rule_itself_can_fail():
    assert _upward("api", "console")
    assert _upward("serving", "tenancy")
    assert _upward("config", "db")
    assert not _upward("db", "config")
    assert _upward("api", "db")
    assert not _upward("console", "api")
    assert not _upward("tessera", "api")


def test_importing_the_app_loads_no_demo_module():
    """The server's own modules, as `tessera serve` builds the app, import nothing of the demo factory."""
    probe = (
        "import sys, tessera.app, tessera.state, grounding.service, grounding.eval, serving.service\n"
        "print(sorted(m for m in sys.modules if m == 'demo' or m.startswith('demo.')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# Model-specific code (transformers' and vLLM's per-architecture modules) is reached only through a family adapter;
# the engine-side plugin that fixes vLLM's Omni embeddings path is loaded into engine processes by its entry point.
FAMILY_HOMES = ("serving/encoders/families/", "serving/engines/vllm_patches.py")
MODEL_MODULES = ("transformers.models.", "vllm.model_executor.models")


def _module_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_nothing_in_serving_outside_the_family_adapters_imports_a_models_own_code():
    offenders = []
    for path in sorted((REPO / "serving").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(FAMILY_HOMES):
            continue
        offenders += [f"{rel}: {name}" for name in _module_imports(path) if name.startswith(MODEL_MODULES)]
    assert offenders == []


# The grounding eval drives the served path from outside: it imports the runtime, never the reverse, so the runtime
# can change without the eval's harness, report and metrics loading into the server.
GROUNDING_EVAL = "grounding.eval"


def _imports_grounding_eval(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        if any(name == GROUNDING_EVAL or name.startswith(f"{GROUNDING_EVAL}.") for name in names):
            return True
    return False


def test_the_grounding_runtime_never_imports_its_eval():
    eval_root = REPO / "grounding" / "eval"
    assert eval_root.is_dir()
    offenders = [
        path.relative_to(REPO).as_posix()
        for path in sorted((REPO / "grounding").rglob("*.py"))
        if eval_root not in path.parents and _imports_grounding_eval(path.read_text())
    ]
    assert offenders == []


def test_the_grounding_eval_rule_itself_can_fail():
    assert _imports_grounding_eval("import grounding.eval")
    assert _imports_grounding_eval("import grounding.eval.harness as h")
    assert _imports_grounding_eval("from grounding.eval.metrics import GATE")
    assert _imports_grounding_eval("from grounding import eval")
    assert _imports_grounding_eval("def f():\n    from grounding.eval import EvalSuite\n")
    assert not _imports_grounding_eval("from grounding import scorer, guardrail")
    assert not _imports_grounding_eval("from grounding.evaluation import x")
    assert not _imports_grounding_eval("from serving.eval import x")
