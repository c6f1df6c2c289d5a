"""A program with as many dispatch call sites in one function as asked: a chain of small matmuls.

A matmul never fuses into the next one, so each is its own dispatch; all have the same shape, so IREE
compiles one executable for all of them and the compile time grows only with the call sites (on a
loaded 2-core machine: 500 in ~9 s, 5,000 in ~85 s for iree-compile alone).
"""

from __future__ import annotations

from pathlib import Path

SIZE = 8
TENSOR = f"tensor<{SIZE}x{SIZE}xf32>"
INPUTS = [f"{SIZE}x{SIZE}xf32=0.1", f"{SIZE}x{SIZE}xf32=0.1"]  # x and w: the chain stays finite


def write_chain_program(path: Path, call_sites: int) -> Path:
    """``call_sites`` chained matmuls in ``@main(%x, %w)``, matmul i located at ``chain.py:i+1``."""
    lines = [
        "module @chain {",
        f"func.func @main(%x: {TENSOR}, %w: {TENSOR}) -> {TENSOR} {{",
        "  %zero = arith.constant 0.0 : f32",
        f"  %e = tensor.empty() : {TENSOR}",
        f"  %z = linalg.fill ins(%zero : f32) outs(%e : {TENSOR}) -> {TENSOR}",
    ]
    previous = "%x"
    for i in range(call_sites):
        lines.append(
            f"  %m{i} = linalg.matmul ins({previous}, %w : {TENSOR}, {TENSOR}) outs(%z : {TENSOR}) -> {TENSOR}"
            f' loc("chain.py":{i + 1}:1)'
        )
        previous = f"%m{i}"
    lines += [f"  return {previous} : {TENSOR}", "}", "}"]
    path.write_text("\n".join(lines) + "\n")
    return path
