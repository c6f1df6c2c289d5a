"""Exports a small paged LLaMA-style decoder's ``prefill`` to ``argv[1]`` (torch MLIR, with locations) and its
f16 weights to the parameter archive ``argv[2]`` (scope ``model``).

``prefill(tokens: 1x? i64, seq_block_ids: 1x? i64, cache: ?xPAGE f16)``, as sharktank's ``prefill_bs1``:
the tokens fill ``seq_block_ids``' pages of :data:`STRIDE` rows each; every layer (RMSNorm, rotary embedding
computed in f32, grouped-query attention, SwiGLU MLP) writes its keys and values into those pages of the
cache in place and attends over them; the result is the logits of every token. A page holds every
layer's keys and values of :data:`STRIDE` tokens (``LAYERS x 2 x STRIDE x KV_HEADS x HEAD_DIM`` f16), as
sharktank's paged cache does. With ``--returned`` the cache is returned updated besides the logits
instead of written in place (a functional cache).
"""

import sys
from pathlib import Path

import torch
from iree.compiler import ir
from iree.compiler.extras import fx_importer

from tracelink.compile.frontends.torch_export import decomposition_table
from tracelink.compile.frontends.torch_parameters import ParameterArchive

VOCAB, DIM, HEADS, KV_HEADS, HEAD_DIM, FFN, LAYERS, STRIDE = 128, 64, 4, 2, 16, 128, 2, 16
SUBBLOCK = STRIDE * KV_HEADS * HEAD_DIM  # f16 elements of one layer's keys (or values) in a page
PAGE = LAYERS * 2 * SUBBLOCK


class RMSNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(DIM, dtype=torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.float()
        return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.float16) * self.weight


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x rotated by its position's angles (computed in f32, back to f16)."""
    wide = x.float()
    first, second = wide[..., : HEAD_DIM // 2], wide[..., HEAD_DIM // 2 :]
    return (wide * cos + torch.cat((-second, first), dim=-1) * sin).to(torch.float16)


def linear(inputs: int, outputs: int) -> torch.nn.Linear:
    return torch.nn.Linear(inputs, outputs, bias=False, dtype=torch.float16)


class Block(torch.nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index
        self.attention_norm, self.mlp_norm = RMSNorm(), RMSNorm()
        self.q, self.k, self.v = linear(DIM, HEADS * HEAD_DIM), linear(DIM, KV_HEADS * HEAD_DIM), linear(DIM, KV_HEADS * HEAD_DIM)
        self.o = linear(HEADS * HEAD_DIM, DIM)
        self.gate, self.up, self.down = linear(DIM, FFN), linear(DIM, FFN), linear(FFN, DIM)

    def forward(self, h: torch.Tensor, subblocks: torch.Tensor, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        seq = h.shape[0]
        x = self.attention_norm(h)
        q = rotary(self.q(x).view(seq, HEADS, HEAD_DIM), cos, sin)
        k = rotary(self.k(x).view(seq, KV_HEADS, HEAD_DIM), cos, sin)
        v = self.v(x).view(seq, KV_HEADS, HEAD_DIM)
        # as sharktank's paged cache: each page's (layer, key or value) sub-block is one row of the cache
        # seen as sub-blocks, written by its row index
        rows = ids * (LAYERS * 2) + self.index * 2
        subblocks.index_copy_(0, rows, k.view(-1, SUBBLOCK))
        subblocks.index_copy_(0, rows + 1, v.view(-1, SUBBLOCK))
        keys = subblocks[rows].reshape(seq, KV_HEADS, HEAD_DIM).repeat_interleave(HEADS // KV_HEADS, dim=1)
        values = subblocks[rows + 1].reshape(seq, KV_HEADS, HEAD_DIM).repeat_interleave(HEADS // KV_HEADS, dim=1)
        attended = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1), is_causal=True)
        h = h + self.o(attended.transpose(0, 1).reshape(seq, HEADS * HEAD_DIM))
        x = self.mlp_norm(h)
        return h + self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


class Decoder(torch.nn.Module):
    def __init__(self, returned: bool) -> None:
        super().__init__()
        self.returned = returned
        self.embed = torch.nn.Embedding(VOCAB, DIM, dtype=torch.float16)
        self.blocks = torch.nn.ModuleList(Block(index) for index in range(LAYERS))
        self.norm = RMSNorm()
        self.head = linear(DIM, VOCAB)

    def forward(self, tokens: torch.Tensor, seq_block_ids: torch.Tensor, cache: torch.Tensor):
        if self.returned:
            cache = cache.clone()
        seq = tokens.shape[1]
        angles = torch.arange(seq, dtype=torch.float32)[:, None] * (10000.0 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
        angles = torch.cat((angles, angles), dim=-1)[:, None, :]
        cos, sin = angles.cos(), angles.sin()
        subblocks = cache.view(-1, SUBBLOCK)
        h = self.embed(tokens[0])
        for block in self.blocks:
            h = block(h, subblocks, seq_block_ids[0], cos, sin)
        logits = self.head(self.norm(h))[None]
        return (logits, cache) if self.returned else logits


if __name__ == "__main__":
    torch.manual_seed(0)
    decoder = Decoder(returned="--returned" in sys.argv).eval()
    with torch.no_grad():
        for parameter in decoder.parameters():
            parameter.normal_(0, 0.1)
    blocks, pages = torch.export.Dim("blocks", min=1, max=16), torch.export.Dim("pages", min=2, max=256)
    example = (torch.zeros(1, 2 * STRIDE, dtype=torch.long), torch.tensor([[1, 0]]), torch.zeros(4, PAGE, dtype=torch.float16))
    shapes = {"tokens": {1: STRIDE * blocks}, "seq_block_ids": {1: blocks}, "cache": {0: pages}}
    program = torch.export.export(decoder, example, dynamic_shapes=shapes)
    archive = ParameterArchive()
    importer = fx_importer.FxImporter(context=ir.Context(), hooks=archive.hooks())
    importer.import_program(program.run_decompositions(decomposition_table((), "paged_decoder")), func_name="prefill")
    Path(sys.argv[1]).write_text(importer.module.operation.get_asm(enable_debug_info=True))
    archive.write(Path(sys.argv[2]))
