"""The IR helpers below every stage: walking a program of a dialect the MLIR bindings have no Python
module for looks for that module once, not once per op."""

from __future__ import annotations

import sys

from iree.compiler import ir

from tracelink.ir_utils import DIALECT_MODULES, new_context, walk

TORCH_PROGRAM = """
func.func @main(%x: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
""" + "".join(f"  %t{i} = torch.aten.relu %{'x' if i == 0 else f't{i - 1}'} : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>\n" for i in range(50)) + """
  return %t49 : !torch.vtensor<[4],f32>
}
"""


class Looked:
    """A finder asked first, counting the dialect modules looked for."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if name.startswith(DIALECT_MODULES):
            self.names.append(name)
        return None


def test_a_missing_dialect_module_is_looked_for_once():
    looked = Looked()
    sys.meta_path.insert(0, looked)
    try:
        for _ in range(2):  # two parses, as the report and the graph each parse the program
            ops = [op.name for op in walk(ir.Module.parse(TORCH_PROGRAM, new_context()).operation)]
            assert ops.count("torch.aten.relu") == 50
    finally:
        sys.meta_path.remove(looked)
    assert looked.names.count(f"{DIALECT_MODULES}torch") <= 1, looked.names  # without the cache: 100
    assert sys.modules[f"{DIALECT_MODULES}torch"] is None
    import iree.compiler.dialects.linalg  # noqa: F401  # a dialect module that exists still loads
    assert sys.modules[f"{DIALECT_MODULES}linalg"] is not None
