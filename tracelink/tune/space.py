"""The search space of tile configurations for one root op.

A configuration sets, per loop of the root op, a ``distribution`` tile (workgroup level), a vector
tile for parallel loops (``vector_common_parallel``) and one for reduction loops (``vector_reduction``).
Each tunable tile is a *knob* with a list of candidate values: the divisors of the loop size within a
factor ``max_ratio`` of the compiler's default (or the user's list from the config); a reduction's
parallel loops also get vector tiles where the default has none (up to two native vectors). The space is every
combination that satisfies the constraints: vector tiles divide workgroup tiles, the accumulator tile
fits the register file, the vector-level working set fits L1, the workgroup working set fits L2, and
there are enough workgroups to keep every core busy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from tracelink.errors import TracelinkError
from tracelink.collect.machine import cache_size, machine_cores
from tracelink.tune.dispatch import Dispatch, element_bytes

MAX_COMBINATIONS = 2_000_000

# Knob name -> lowering-config field, by loop kind.
FIELD_OF_KIND = {"parallel": "vector_common_parallel", "reduction": "vector_reduction"}


@dataclass(frozen=True)
class Knob:
    """One tunable tile size: ``field[loop]`` of the lowering config."""

    name: str  # distribution_m, vector_m, vector_k, ...
    field: str
    loop: int
    values: tuple[int, ...]


@dataclass
class SpaceOptions:
    """Bounds of the space; every field can be set in the ``[space]`` table of the tune config."""

    max_ratio: int = 8  # candidate tiles lie within default / max_ratio .. default * max_ratio
    register_bytes: int = 2048  # accumulator (parallel vector tile) size limit: 32 x 512-bit registers
    # IREE rejects vector ops of 512 native vectors or more; 0: 512 x the target's native_vector_size
    # (16384 bytes with AVX2's 32-byte vectors, 32768 with AVX-512)
    max_vector_bytes: int = 0
    l1_bytes: int = field(default_factory=lambda: cache_size(1, 32 * 1024))
    l2_bytes: int = field(default_factory=lambda: cache_size(2, 1024 * 1024))
    min_workgroups: int = field(default_factory=machine_cores)
    values: dict[str, list[int]] = field(default_factory=dict)  # knob name -> user candidate values
    # (a knob a dispatch does not have is ignored for it; TileSpace.knob_names lists those it has)

    @classmethod
    def from_table(cls, table: dict, where: str) -> "SpaceOptions":
        options = cls()
        for key, value in table.items():
            if key in ("max_ratio", "register_bytes", "max_vector_bytes", "l1_bytes", "l2_bytes", "min_workgroups"):
                if not isinstance(value, int) or value < 0:
                    raise TracelinkError(f"{where}: [space] {key} must be a non-negative integer, got {value!r}")
                setattr(options, key, value)
            elif key.startswith(("distribution_", "vector_")):
                if not isinstance(value, list) or not value or not all(isinstance(v, int) and v >= 0 for v in value):
                    raise TracelinkError(f"{where}: [space] {key} must be a non-empty list of non-negative integers")
                options.values[key] = sorted(set(value))
            else:
                raise TracelinkError(
                    f"{where}: unknown key '{key}' in [space] (expected distribution_<dim>, vector_<dim>, "
                    "max_ratio, register_bytes, max_vector_bytes, l1_bytes, l2_bytes, min_workgroups)"
                )
        return options


def _divisors_near(size: int, default: int, ratio: int) -> list[int]:
    low, high = max(1, default // ratio), default * ratio
    return [d for d in range(1, size + 1) if size % d == 0 and low <= d <= high] or [default]


class TileSpace:
    """Every valid configuration of one dispatch, as a list of knob-value tuples."""

    def __init__(self, dispatch: Dispatch, options: SpaceOptions | None = None):
        self.dispatch = dispatch
        self.options = options or SpaceOptions()
        self.knobs = self._make_knobs()
        if not self.knobs:
            raise TracelinkError(f"{dispatch.export}: the default config leaves no tile size to tune")
        self._in_bytes = [element_bytes(t) for t in dispatch.operand_types]
        self._workgroup_floor = min(self.options.min_workgroups, self._max_workgroups())
        combinations = 1
        for knob in self.knobs:
            combinations *= len(knob.values)
        if combinations > MAX_COMBINATIONS:
            raise TracelinkError(
                f"{dispatch.export}: {combinations} tile combinations are too many to enumerate; "
                "narrow them with [space] lists or a smaller max_ratio in the tune config"
            )
        self.points: list[tuple[int, ...]] = []
        self.rejected: dict[str, int] = {}
        for point in itertools.product(*(knob.values for knob in self.knobs)):
            reason = self.violation(point)
            if reason is None:
                self.points.append(point)
            else:
                self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if not self.points:
            reasons = ", ".join(f"{count} by {reason}" for reason, count in sorted(self.rejected.items()))
            raise TracelinkError(f"{dispatch.export}: the search space is empty (all combinations rejected: {reasons})")
        self.index = {point: i for i, point in enumerate(self.points)}
        self.default_point = tuple(self._default_value(knob) for knob in self.knobs)

    # -- construction -------------------------------------------------------------------------
    def _default_value(self, knob: Knob) -> int:
        return self.dispatch.default_config[knob.field][knob.loop]

    @staticmethod
    def knob_slots(dispatch: Dispatch) -> list[tuple[str, str, int]]:
        """(knob name, config field, loop) of every tile size a dispatch's root op has."""
        slots = []
        for loop in dispatch.loops:
            if loop.index in dispatch.fixed_loops:
                continue
            if loop.kind == "parallel":
                slots.append((f"distribution_{loop.role}", "distribution", loop.index))
            slots.append((f"vector_{loop.role}", FIELD_OF_KIND[loop.kind], loop.index))
        return slots

    @staticmethod
    def knob_names_of(dispatch: Dispatch) -> list[str]:
        return [name for name, _, _ in TileSpace.knob_slots(dispatch)]

    def _make_knobs(self) -> list[Knob]:
        """Knobs for the tiles the default sets (above 0 or 1) and for every tile the user lists."""
        dispatch, options = self.dispatch, self.options
        knobs = []
        for name, field_name, loop_index in self.knob_slots(dispatch):
            loop = dispatch.loops[loop_index]
            default = dispatch.default_config.get(field_name, [0] * len(dispatch.loops))[loop_index]
            if name in options.values:
                values = tuple(options.values[name])
                if max(values) > loop.size:
                    raise TracelinkError(f"{name}: tile {max(values)} exceeds the loop size {loop.size}")
            elif default > (0 if field_name == "distribution" else 1) and loop.size > 1:
                values = tuple(_divisors_near(loop.size, default, options.max_ratio))
            elif dispatch.kind == "reduction" and field_name == "vector_common_parallel" and loop.size > 1:
                # IREE vectorises a reduction along its innermost parallel loop only; another one can be
                # far better (a loop the input does not index, where a vector is one broadcast sum)
                values = tuple(d for d in range(1, loop.size + 1) if loop.size % d == 0 and d <= 2 * self._lanes())
            else:
                continue
            if field_name not in dispatch.default_config:
                raise TracelinkError(f"{dispatch.export}: the default config has no '{field_name}' to tune")
            knobs.append(Knob(name, field_name, loop_index, values))
        return knobs

    def _lanes(self) -> int:
        """Elements of the root op's result in one native vector of the target."""
        return max(1, self.dispatch.native_vector_bytes // element_bytes(self.dispatch.operand_types[-1]))

    # -- queries --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.points)

    def config(self, point: tuple[int, ...] | int) -> dict[str, list[int]]:
        """The full lowering-config fields of a point (or point index)."""
        if isinstance(point, (int, np.integer)):
            point = self.points[point]
        fields = {name: list(values) for name, values in self.dispatch.default_config.items()}
        for knob, value in zip(self.knobs, point):
            fields[knob.field][knob.loop] = value
        return fields

    def knob_values(self, point: tuple[int, ...] | int) -> dict[str, int]:
        if isinstance(point, (int, np.integer)):
            point = self.points[point]
        return {knob.name: value for knob, value in zip(self.knobs, point)}

    def tiles(self, point: tuple[int, ...]) -> tuple[list[int], list[int]]:
        """(workgroup tile, vector tile) per loop; 0 (untiled) becomes the full loop size."""
        fields = self.config(point)
        loops = self.dispatch.loops
        distribution = [fields["distribution"][i] or loop.size for i, loop in enumerate(loops)]
        vector = []
        for i, loop in enumerate(loops):
            value = fields.get(FIELD_OF_KIND[loop.kind], [0] * len(loops))[i]
            vector.append(value or distribution[i])
        return distribution, vector

    def footprint(self, tile: list[int], operands: range | list[int]) -> int:
        """Bytes of the operands' slices touched by one tile of the iteration space."""
        total = 0
        for operand in operands:
            count = 1
            for terms in self.dispatch.access[operand]:
                count *= 1 + sum(coefficient * (tile[loop] - 1) for loop, coefficient in terms)
            total += count * self._in_bytes[operand]
        return total

    def derived(self, point: tuple[int, ...]) -> dict[str, float]:
        """Quantities the constraints and the cost model use."""
        distribution, vector = self.tiles(point)
        loops = self.dispatch.loops
        n_operands = len(self.dispatch.access)
        inputs, output = list(range(n_operands - 1)), [n_operands - 1]
        workgroup_tile = [d if loop.kind == "parallel" else loop.size for d, loop in zip(distribution, loops)]
        workgroups = 1
        for d, loop in zip(distribution, loops):
            if loop.kind == "parallel":
                workgroups *= -(-loop.size // d)
        accumulator = [v if loop.kind == "parallel" else 1 for v, loop in zip(vector, loops)]
        vector_inputs = self.footprint(vector, inputs)
        macs = 1
        for v in vector:
            macs *= v
        return {
            "workgroups": workgroups,
            "register_bytes": self.footprint(accumulator, output),
            "vector_bytes": macs * max(self._in_bytes),
            "l1_bytes": vector_inputs + self.footprint(accumulator, output),
            "l2_bytes": self.footprint(workgroup_tile, range(n_operands)),
            "intensity": macs / max(1, vector_inputs),
            "vector_tiles_per_workgroup": float(
                np.prod([d / v for d, v, loop in zip(distribution, vector, loops) if loop.kind == "parallel"])
            ),
        }

    def violation(self, point: tuple[int, ...]) -> str | None:
        """Name of the first constraint ``point`` breaks, or None."""
        distribution, vector = self.tiles(point)
        for d, v, loop in zip(distribution, vector, self.dispatch.loops):
            if loop.kind == "parallel" and d % v:
                return "vector tile not dividing workgroup tile"
        facts = self.derived(point)
        options = self.options
        if facts["register_bytes"] > options.register_bytes:
            return "register_bytes"
        if facts["vector_bytes"] >= (options.max_vector_bytes or 512 * self.dispatch.native_vector_bytes):
            return "max_vector_bytes"
        if facts["l1_bytes"] > options.l1_bytes:
            return "l1_bytes"
        if facts["l2_bytes"] > options.l2_bytes:
            return "l2_bytes"
        if facts["workgroups"] < self._workgroup_floor:
            return "min_workgroups"
        return None

    def _max_workgroups(self) -> int:
        most = 1
        for knob in self.knobs:
            if knob.field == "distribution":
                most *= -(-self.dispatch.loops[knob.loop].size // min(knob.values))
        return most

    def neighbor_table(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR arrays (offsets, targets): the valid points differing from each point in one knob."""
        if getattr(self, "_neighbors", None) is None:
            offsets, targets = [0], []
            for point in self.points:
                for k, knob in enumerate(self.knobs):
                    for value in knob.values:
                        if value != point[k]:
                            found = self.index.get(point[:k] + (value,) + point[k + 1 :])
                            if found is not None:
                                targets.append(found)
                offsets.append(len(targets))
            self._neighbors = (np.asarray(offsets, dtype=np.int64), np.asarray(targets, dtype=np.int64))
        return self._neighbors

    def random_neighbors(self, indices: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One random neighbour of each point (the point itself when it has none)."""
        offsets, targets = self.neighbor_table()
        indices = np.asarray(indices, dtype=np.int64)
        if len(targets) == 0:  # a space of one point, or of points no single knob change connects
            return indices
        counts = offsets[indices + 1] - offsets[indices]
        picks = offsets[indices] + (rng.random(len(indices)) * np.maximum(counts, 1)).astype(np.int64)
        return np.where(counts > 0, targets[np.minimum(picks, len(targets) - 1)], indices)

    def describe(self) -> str:
        knobs = ", ".join(f"{knob.name}={list(knob.values)}" for knob in self.knobs)
        return f"{len(self)} configurations of {knobs}"
