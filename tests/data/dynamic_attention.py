"""Exports a dynamic-length attention with a KV-cache argument to ``argv[1]`` (torch MLIR, with locations).

``prefill(x: ?x64 f32, cache: ?x2048 f32)``: a QKV projection of the ``?`` tokens, their keys and values
written into the cache (pages of 16 rows of 2 x 64: key, value; as many pages as the run gives) in place,
causal attention over the written rows, an output projection. torch.export sees the cache as a mutated input: the imported function takes it
as a mutable ``!torch.tensor`` and overwrites its contents, as a paged decoder's cache is.
"""

import sys
from pathlib import Path

import torch
from iree.compiler import ir
from iree.compiler.extras import fx_importer

from tracelink.compile.frontends.torch_export import decomposition_table

D, HEADS, PAGES, PAGE = 64, 4, 16, 16  # PAGES: the example's; the exported cache has any number


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.out = torch.nn.Linear(D, D)

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        seq = x.shape[0]
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        rows = cache.view(-1, 2, D)
        rows[:seq, 0] = k
        rows[:seq, 1] = v
        keys, values = rows[:seq, 0], rows[:seq, 1]
        q = q.view(seq, HEADS, D // HEADS).transpose(0, 1)
        keys = keys.view(seq, HEADS, D // HEADS).transpose(0, 1)
        values = values.view(seq, HEADS, D // HEADS).transpose(0, 1)
        attended = torch.nn.functional.scaled_dot_product_attention(q, keys, values, is_causal=True)
        return self.out(attended.transpose(0, 1).reshape(seq, D))


if __name__ == "__main__":
    torch.manual_seed(0)
    tokens, pages = torch.export.Dim("tokens", min=2, max=PAGES * PAGE), torch.export.Dim("pages", min=2, max=64)
    example = (torch.randn(32, D), torch.zeros(PAGES, 2 * PAGE * D))
    program = torch.export.export(Attention().eval(), example, dynamic_shapes={"x": {0: tokens}, "cache": {0: pages}})
    importer = fx_importer.FxImporter(context=ir.Context())
    importer.import_program(program.run_decompositions(decomposition_table((), "dynamic_attention")), func_name="prefill")
    Path(sys.argv[1]).write_text(importer.module.operation.get_asm(enable_debug_info=True))
