"""The package's architecture holds: no import cycles, a pure core that never imports the UI."""

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1] / "pase"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> nx.DiGraph:
    """Module -> the pase modules it imports anywhere in its text (function-level imports included)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pase.x import y` imports the submodule pase.x.y when there is one.
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph.add_edge(name, target)
    return graph


def test_the_package_has_no_import_cycle():
    graph = _import_graph()
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + c[:1]) for c in cycles[:5])


def test_the_walk_sees_the_package_s_imports():
    # Guards the test above against passing because it saw nothing.
    graph = _import_graph()
    assert graph.has_edge("pase.planner", "pase.model.cost")
    assert graph.has_edge("pase.analysis.baselines", "pase.planner")
    assert graph.number_of_edges() > 50


def test_the_core_never_imports_the_ui():
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for n in names:
                assert n.split(".")[0] not in {"streamlit", "plotly", "ui"}, f"{path} imports {n}"


def test_torch_is_imported_only_by_the_profiler_and_the_pytorch_importer():
    # pase calibrate's profiler and pase.io.torch (from_torch) need torch; nothing else may import it, so that
    # pase plans on machines without it (pase calibrate then says so in one line).
    allowed = {ROOT / "calibrate" / "profile.py", ROOT / "io" / "torch.py"}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            if any(n.split(".")[0] == "torch" for n in names):
                assert path in allowed, f"{path} imports torch"


def test_the_cost_model_never_imports_the_searches():
    # The cost graph sits in the IR (pase.ir.costgraph): the model builds it, the searches solve it, and the model
    # reaches no search module, directly or through another module.
    graph = _import_graph()
    for model in (n for n in graph if n.startswith("pase.model.")):
        reached = nx.descendants(graph, model)
        assert not any(n.startswith("pase.search") for n in reached), (model, sorted(
            n for n in reached if n.startswith("pase.search")))
