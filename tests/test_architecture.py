"""The package's structure as docs/reference/architecture.md draws it, checked on the source itself.

Every module belongs to one layer: the shared base below everything, one package per stage (compile →
provenance → collect → aggregate → the profile directory → compare / report → tune), the pipeline that
runs the stages, and the commands on top. No layer imports a later one (or a sibling of its rank), no
module imports another in a circle or goes through the package root, only the commands import a command,
units are small, every profile-directory file is named in one module, and IREE's run and benchmark tools
are named in one module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tracelink"
# Bottom to top; layers of one rank do not import each other (report and compare both read a profile).
LAYER_RANK = {
    "base": 0, "compile": 1, "provenance": 2, "collect": 3, "aggregate": 4, "profile_dir": 5, "compare": 6, "report": 6,
    "tune": 7, "pipeline": 8, "commands": 9, "api": 10,
}
# What every stage shares: the modules at the top of the package, and the profile directory's declared
# names and ownership (the compile stage already writes into the directory) and tune's record in it (the
# advice of the aggregate stage reads it).
BASE = {
    "tracelink.version", "tracelink.errors", "tracelink.atomic", "tracelink.textsafe", "tracelink.tools", "tracelink.iree_tools",
    "tracelink.ir_utils", "tracelink.profile_dir", "tracelink.profile_dir.files", "tracelink.profile_dir.claim",
    "tracelink.profile_dir.tune_record",
}
MAX_TOP_LEVEL_MODULES = 8
# The one module that declares the profile directory's files; a spelled name anywhere else is a second owner.
DIRECTORY_SCHEMA = "tracelink.profile_dir.files"
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


def layer_of(module: str) -> str | None:
    """The module's layer; None for a module placed in none (a new top-level module must be placed)."""
    if module == "tracelink":
        return "api"
    if module in BASE:
        return "base"
    parts = module.split(".")
    return parts[1] if parts[1] in LAYER_RANK else None


IMPORTS = nx.DiGraph([(module, target) for module, path in MODULES.items() for target in load_time_imports(path)])


def test_every_module_is_in_a_layer_and_the_top_is_small():
    assert sorted(module for module in MODULES if layer_of(module) is None) == []
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_no_layer_imports_a_later_one():
    later = [(module, target) for module, target in IMPORTS.edges
             if (layer := layer_of(module)) != (imported := layer_of(target)) and LAYER_RANK[imported] >= LAYER_RANK[layer]]
    assert later == []


def all_imports(path: Path) -> set[str]:
    """Every tracelink module ``path`` imports, deferred imports inside functions included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tracelink"):
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names & set(MODULES)


def test_only_the_commands_import_a_command():
    commands = {module for module in MODULES if layer_of(module) == "commands"}
    importing = sorted(module for module, path in MODULES.items() if layer_of(module) != "commands" and all_imports(path) & commands)
    assert importing == []


def spelled_strings(path: Path) -> set[str]:
    """The string constants of a module that could name a file (no white space), docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and node.value and not any(character.isspace() for character in node.value)}


def test_profile_directory_files_are_named_in_the_schema_only():
    from tracelink.profile_dir import files

    names = {value.rpartition("/")[2] for value in vars(files).values() if isinstance(value, str) and "." in value}
    names |= {path.name for path in (files.TUNE_RECORDS, files.TUNE_STRATEGIES, files.TUNE_TRIALS, files.TUNE_SCHEDULE,
                                     files.TUNE_SUMMARY, files.TUNE_CHECK)}
    names |= set(map(files.csv, (*files.TABLES, *files.MEMORY_TABLES, *files.REFERENCE_TABLES))) | set(map(files.parquet, files.OPTIONAL_FRAMES))
    spelled = sorted((module, value) for module, path in MODULES.items() if module != DIRECTORY_SCHEMA
                     for value in spelled_strings(path) if value.rpartition("/")[2] in names)
    assert spelled == []


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
