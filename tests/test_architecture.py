"""The package's structure as docs/reference/architecture.md draws it, checked on the source itself.

One package per stage (compile → provenance → collect → aggregate → report / tune): no stage imports a
later one, no module imports another in a circle or goes through the package root, small units, and
IREE's run and benchmark tools named in one module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tracelink"
# report and tune both read the aggregated profile, and neither imports the other
STAGE_RANK = {"compile": 0, "provenance": 1, "collect": 2, "aggregate": 3, "report": 4, "tune": 4}
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 80
# The one module that spells these tools' command lines (tracelink.iree_tools).
RUN_TOOLS = ("iree-run-module", "iree-benchmark-module")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def load_time_imports(path: Path) -> set[str]:
    """The tracelink modules ``path`` imports when it is loaded: its module-level imports, not those
    inside functions (deferred on purpose) or under ``if TYPE_CHECKING``."""
    imported: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit([*getattr(node, "body", []), *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                       *(statement for handler in getattr(node, "handlers", []) for statement in handler.body)])
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tracelink":
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in MODULES)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names if alias.name.split(".")[0] == "tracelink")

    visit(ast.parse(path.read_text()).body)
    return {name for name in imported if name in MODULES}


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGE_RANK else None


IMPORTS = nx.DiGraph([(module, target) for module, path in MODULES.items() for target in load_time_imports(path)])


def test_no_stage_imports_a_later_stage():
    later = [(module, target) for module, target in IMPORTS.edges
             if (stage := stage_of(module)) and (imported := stage_of(target)) and imported != stage
             and STAGE_RANK[imported] >= STAGE_RANK[stage]]
    assert later == []


def test_no_import_circles_and_none_through_the_package_root():
    assert list(nx.simple_cycles(IMPORTS)) == []
    assert sorted(module for module, target in IMPORTS.edges if target == "tracelink") == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_units_are_small(module):
    source = MODULES[module].read_text()
    assert source.count("\n") <= MAX_MODULE_LINES
    long = [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def modules_naming(*tools: str) -> set[str]:
    return {module for module, path in MODULES.items() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and node.value in tools}


def test_iree_run_tools_are_named_in_one_module():
    assert modules_naming(*RUN_TOOLS) == {"tracelink.iree_tools"}


def test_the_compiler_command_is_built_in_one_module():
    # tracelink.tools finds every tool's binary (the compiler's in its own package); iree_tools builds the
    # command, on one thread when a tuning spec is given (iree_tools.SINGLE_THREAD_FLAG)
    assert modules_naming("iree-compile") == {"tracelink.iree_tools", "tracelink.tools"}
