"""The strategy search's space: IREE's whole-program lowering options (each flag verified by compiling
with IREE 3.13.0), how they combine, the candidates built from them and how a race's results settle
the winner. The search itself is :mod:`tracelink.tune.strategy`."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

PREPROCESSING = "--iree-preprocessing-pass-pipeline="


@dataclass(frozen=True)
class Option:
    """One lowering choice: plain iree-compile flags and/or passes of the preprocessing pipeline (one
    flag holds the whole pipeline, so options with passes are merged into a single flag), and/or
    rewrites of the program at IREE's input level (names of ``tracelink.tune.rewrites.PROGRAM_REWRITES``:
    the build compiles the rewritten program, which is handed over with the flags)."""

    name: str
    flags: tuple[str, ...] = ()
    passes: tuple[str, ...] = ()
    rewrites: tuple[str, ...] = ()
    # "layout": changes what the convolutions become; "lowering": how contractions are lowered (data
    # tiling, ukernels), which matters once convolutions are matmuls; "other": extra candidates
    role: str = "other"


OPTIONS: tuple[Option, ...] = (
    # convolutions as im2col + matmul (the global-optimization flag of 3.13)
    Option("im2col", ("--iree-global-opt-use-im2col-for-convs",), role="layout"),
    # NCHW convolutions rewritten as NHWC with transposes around them
    Option("channels-last", passes=("iree-preprocessing-convert-conv-to-channels-last",), role="layout"),
    # matmuls packed into tiled layouts (mmt4d); without ukernels codegen vectorizes the tiles
    Option("data-tiling", ("--iree-opt-data-tiling",), role="lowering"),
    Option("ukernels", ("--iree-llvmcpu-enable-ukernels=all",), role="lowering"),
    # data tiling for convolutions too (the option is a list: repeated, not comma-separated), with the
    # ukernels for the mmt4d ops it makes (without them it can be slower than the default)
    Option("conv-data-tiling", ("--iree-opt-data-tiling", "--iree-dispatch-creation-experimental-set-data-tiling-ops=matmul",
                                "--iree-dispatch-creation-experimental-set-data-tiling-ops=convolution",
                                "--iree-llvmcpu-enable-ukernels=all"), role="layout"),
    # transposes (e.g. of channels-last) propagated through convolutions and into named ops
    Option("transposes", ("--iree-global-opt-propagate-transposes-through-conv", "--iree-opt-aggressively-propagate-transposes"),
           role="layout"),
    # attention (iree_linalg_ext.attention) as its online form decomposed into matmuls, max, exp2, sums and a
    # scale, before global optimization, so data tiling reaches its matmuls, where IREE's attention
    # dispatch runs one query row at a time (docs/reference/tuning.md). Searched only where the program
    # has attention.
    Option("decompose-attention", passes=("iree-linalg-ext-convert-attention-to-online-attention", "iree-linalg-ext-decompose-attention",
                                          "canonicalize", "cse"), role="layout"),
    # 1-D convolutions rewritten as 2-D ones on a height-1 view (tracelink.tune.rewrites), with the
    # im2col flag they are rewritten for: IREE's im2col and data tiling take 2-D convolutions only, and
    # the 2-D op alone lowers no better than the 1-D one (docs/reference/tuning.md). Searched only where
    # the program has a 1-D convolution.
    Option("conv1d-as-conv2d", ("--iree-global-opt-use-im2col-for-convs",), rewrites=("conv1d-as-conv2d",), role="layout"),
    # a patch embedding (strides equal to the kernel) as a reshape, a transpose and a matmul, which data
    # tiling then packs as any matmul. One op of a ViT: its gain shows once a layout has made the rest
    # fast (docs/reference/tuning.md), so it is combined with each surviving layout as the lowering
    # options are, rather than having to survive the first race alone. Searched only where the program
    # has one.
    Option("patches-as-matmul", rewrites=("patches-as-matmul",), role="lowering"),
    # a grouped convolution (Wav2Vec2's positional one, a ResNeXt block's) as a batch matmul of its
    # windows, one batch per group: IREE's im2col and conv data tiling leave grouped convolutions to a
    # direct loop nest. One op or a few of a model, so combined as patches-as-matmul is; searched only
    # where the program has one.
    Option("grouped-conv-as-matmul", rewrites=("grouped-conv-as-matmul",), role="lowering"),
    # a convolution's computed input kept out of its dispatches (an optimization barrier), so im2col's
    # window copy does not compute the input's producers again for each window (tracelink.tune.rewrites).
    # It changes nothing until a layout makes the convolutions im2col + matmul, so it is combined with
    # each surviving layout as the lowering options are; searched where a convolution's input is computed.
    Option("materialized-conv-inputs", rewrites=("materialized-conv-inputs",), role="lowering"),
    # attention as two batch matmuls around a softmax (tracelink.tune.rewrites), so data tiling packs both
    # matmuls whole: the other way to reach the matmuls of attention than decompose-attention's online form,
    # which computes the scores a tile of keys at a time. Searched where the program has attention in the
    # form it rewrites.
    Option("attention-as-matmuls", rewrites=("attention-as-matmuls",), role="layout"),
)
# Options that act on one kind of op only: searched where a dispatch of the profile has that root op.
ROOT_OP_OF = {"decompose-attention": "iree_linalg_ext.attention"}


def combine(options: list[Option]) -> Option:
    """Several options as one build: flags in order without repeats, passes in one pipeline."""
    flags = tuple(dict.fromkeys(flag for option in options for flag in option.flags))
    passes = tuple(dict.fromkeys(p for option in options for p in option.passes))
    rewrites = tuple(dict.fromkeys(r for option in options for r in option.rewrites))
    return Option("+".join(option.name for option in options), flags, passes, rewrites)


def option_flags(option: Option) -> list[str]:
    """The iree-compile flags of an option (its passes as one preprocessing pipeline)."""
    pipeline = [f"{PREPROCESSING}builtin.module(util.func({','.join(option.passes)}))"] if option.passes else []
    return [*option.flags, *pipeline]


def build_key(option: Option) -> frozenset[str]:
    """What makes a build: options with the same key build the same program (a rewrite counts)."""
    return frozenset([*option_flags(option), *(f"rewrite:{name}" for name in option.rewrites)])


# The reason of a strategy an earlier, shorter race found faster and the final race did not confirm.
UNCONFIRMED = "read faster in an earlier race, not confirmed by the final race"


@dataclass
class Candidate:
    """A strategy being searched and what was measured of it (one entry of strategies.json)."""

    option: Option
    status: str = "not run"
    reason: str = ""
    ratio: float | None = None
    ci: list[float] | None = None
    vmfb: Path | None = None
    stage: int = 1
    program: Path | None = None  # a rewritten program (per-op composition); None: the profiled one

    @property
    def name(self) -> str:
        return self.option.name

    def entry(self) -> dict:
        return {"name": self.name, "flags": option_flags(self.option), "status": self.status, "reason": self.reason,
                "ratio": self.ratio, "ci": self.ci, "program": str(self.program) if self.program else None}


@dataclass
class StrategyOptions:
    """The [strategy] table of tune.toml."""

    enabled: bool = True
    only: list = field(default_factory=list)  # names of OPTIONS to search (empty: all of them)
    # outputs agree when every element differs from the default build's by at most this fraction of the
    # output's largest magnitude (see outputs_agree)
    tolerance: float = 1e-3
    first_rounds: int = 3  # alternating rounds of the races of single options and of combinations
    final_rounds: int = 6  # ... and of the final race of the best few
    keep: int = 2  # single options that go on to combinations (at most)
    finalists: int = 3  # builds of the latest stage raced again in the final race (at most)
    diff_rounds: int = 3  # alternating rounds of each faster strategy's per-line diff against the base
    profile_top: int = 2  # faster strategies profiled for the per-line table (see profile_order)
    compose: bool = True  # try the profiled strategies per convolution (tracelink.tune.compose)
    # alternating rounds of the compositions against the winner: they are only a few per cent apart,
    # which fewer rounds on a busy machine did not always resolve (docs/reference/numbers.md)
    compose_rounds: int = 30
    calls: int = 5  # calls of the program per timed run
    # extra candidates: name = [flags] (e.g. a numerics-changing demotion, to see it refused)
    extra: dict = field(default_factory=dict)


def settle(candidates: list[Candidate]) -> Candidate | None:
    """The winner: the fastest of the significantly faster candidates of the last race (the longest).

    When the last race found none faster, a candidate an earlier, shorter race found faster becomes
    "not faster" (:data:`UNCONFIRMED`): the advice and the summary then agree that nothing was."""
    timed = [c for c in candidates if c.ci is not None]
    last = max((c.stage for c in timed), default=0)
    winners = [c for c in timed if c.stage == last and c.status == "faster"]
    if not winners:
        for candidate in timed:
            if candidate.status == "faster":
                candidate.status, candidate.reason = "not faster", f"{UNCONFIRMED}: {candidate.reason}"
    return max(winners, key=lambda c: c.ratio or 0.0) if winners else None


def layouts(name: str) -> list[str] | None:
    """The layout options of a strategy named by :func:`combine`; None: not a combination of
    :data:`OPTIONS` (an ``extra`` candidate, a composition)."""
    known = {option.name: option for option in OPTIONS}
    parts = [known.get(part) for part in name.split("+")]
    return None if None in parts else [option.name for option in parts if option.role == "layout"]


def best_half(candidates: list[Candidate], most: int) -> list[Candidate]:
    """The faster half (by point estimate, faster than the default) of timed candidates, at most ``most``."""
    hopeful = sorted((c for c in candidates if c.ratio is not None and c.ratio > 1 and c.vmfb is not None),
                     key=lambda c: -c.ratio)
    return hopeful[: max(1, min(most, (len(hopeful) + 1) // 2))] if hopeful else []


# A surviving layout more than this many times slower than the best surviving layout gets the lowering options
# all at once only. In ten tune runs on the five models of tests/bench/bench_framework.py the winner grew
# from the best single layout each time. On the audio encoder the second survivor (channels-last, 1.2-1.4x
# beside conv1d-as-conv2d's 4.9-6.0x) took 15 of stage 2's 31 builds, none above 1.34x the default where
# the leader's reached 11.8-20.4x, and the budget ran out before the winner was profiled.
WEAK_SURVIVOR = 2.0


def combinations(survivors: list[Candidate], singles: list[Candidate]) -> list[Option]:
    """What stage 2 builds: each surviving layout option with every non-empty set of the contraction
    lowering options (data tiling and ukernels act on the matmuls that im2col or channels-last make, so
    they can help together and not alone: docs/reference/numbers.md), a layout :data:`WEAK_SURVIVOR`
    times slower than the best surviving layout with all of them only, then the survivors together; the
    most promising first, so a short budget reaches them. Duplicates (same build) are left out."""
    lowering = [c.option for c in singles if c.option.role == "lowering"]
    best = max((c.ratio for c in survivors if c.option.role == "layout" and c.ratio is not None), default=None)
    built: list[Option] = []
    for survivor in survivors:
        if survivor.option.role != "layout":
            continue
        weak = best is not None and survivor.ratio is not None and survivor.ratio * WEAK_SURVIVOR < best
        for size in [len(lowering)] if weak else range(len(lowering), 0, -1):
            built += [combine([survivor.option, *group]) for group in itertools.combinations(lowering, size)]
    built += [combine([c.option for c in group]) for size in range(2, len(survivors) + 1)
              for group in itertools.combinations(survivors, size)]
    unique: dict[frozenset, Option] = {}
    for option in built:
        unique.setdefault(build_key(option), option)
    return list(unique.values())


def directory_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)
