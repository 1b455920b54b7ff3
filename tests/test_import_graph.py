"""The package's import graph: no cycle, and no flowerbed import hidden inside a function (the
usual way of dodging a cycle). Read from the source with ``ast``, so it needs no import."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "flowerbed"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported_modules(module: str, node: ast.AST) -> list[str]:
    """flowerbed modules an import statement names (``from .x import y`` may name x.y)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [target] + [f"{target}.{alias.name}" for alias in node.names]
    elif isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        return []
    return [name for name in names if name in MODULES]


def graph() -> tuple[dict[str, set[str]], list[str]]:
    edges, hidden = {m: set() for m in MODULES}, []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    if imported_modules(module, node):
                        hidden.append(f"{module}:{function.name}")
        for node in ast.walk(tree):
            for target in imported_modules(module, node):
                if target != module and not module.startswith(target + "."):
                    edges[module].add(target)
    return edges, hidden


def test_no_flowerbed_import_inside_a_function():
    _, hidden = graph()
    assert hidden == []


def test_no_import_cycle():
    edges, _ = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_server_side_does_not_import_the_client_side():
    edges, _ = graph()
    for server in ("flowerbed.server_app", "flowerbed.runtime.context", "flowerbed.catalog"):
        assert "flowerbed.client_app" not in edges[server], server
    assert "flowerbed.training.local_client" not in edges["flowerbed.server_app"]
    assert "flowerbed.catalog" not in edges["flowerbed.settings"]  # validation stays below
    assert edges["flowerbed.settings"] == set()  # the declarations' mechanism imports nothing
