"""The profile directory: write every table of a profile and read it back as one object."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pandas as pd

from tracelink import TracelinkError
from tracelink.atomic import write_atomic, write_text_atomic
from tracelink.collect.events import EVENT_SCHEMA, make_events
from tracelink.provenance.graph import read_graph

TABLES = ("call_sites", "exports", "source_ops", "source_lines")
OPTIONAL_FRAMES = ("workgroups", "zones")


@dataclass
class Profile:
    """Everything one ``tracelink profile`` run learned."""

    directory: Path
    summary: dict
    events: pd.DataFrame
    call_sites: pd.DataFrame
    exports: pd.DataFrame
    source_ops: pd.DataFrame
    source_lines: pd.DataFrame
    graph: nx.DiGraph
    workgroups: pd.DataFrame | None = None  # hook collector: one row per workgroup call
    zones: pd.DataFrame | None = None  # tracy collector: every zone of the runtime

    @property
    def artifacts(self) -> Path:
        return self.directory / "artifacts"

    @property
    def manifest(self) -> dict:
        path = self.artifacts / "manifest.json"
        return json.loads(path.read_text()) if path.exists() else {}


def write_profile(profile: Profile) -> None:
    """Write the tables, events and summary into the profile directory.

    The provenance graph is not written here: the pipeline writes it as soon as it is built (so it
    survives a failing run), and nothing after that changes it.
    """
    directory = profile.directory
    write_atomic(directory / "events.parquet", lambda p: profile.events.to_parquet(p, index=False))
    for name in TABLES:
        table: pd.DataFrame = getattr(profile, name)
        write_atomic(directory / f"{name}.csv", lambda p, t=table: t.to_csv(p, index=False))
    for name in OPTIONAL_FRAMES:
        frame: pd.DataFrame | None = getattr(profile, name)
        if frame is not None:
            write_atomic(directory / f"{name}.parquet", lambda p, f=frame: f.to_parquet(p, index=False))
    write_profile_summary(profile)


def write_profile_summary(profile: Profile) -> None:
    """Write ``profile.json`` (the summary) alone."""
    write_text_atomic(profile.directory / "profile.json", json.dumps(profile.summary, indent=2, default=str))


def load_profile(directory: Path) -> Profile:
    """Read a profile directory written by ``tracelink profile``."""
    directory = Path(directory)
    summary_path = directory / "profile.json"
    if not summary_path.is_file():
        raise TracelinkError(f"{directory}: not a profile directory (no profile.json; run 'tracelink profile' first)")
    tables = {name: read_table(directory / f"{name}.csv") for name in TABLES}
    events = make_events(pd.read_parquet(directory / "events.parquet")) if (directory / "events.parquet").exists() else make_events([])
    return Profile(
        directory=directory,
        summary=json.loads(summary_path.read_text()),
        events=events.astype(EVENT_SCHEMA),
        graph=read_graph(directory / "provenance.json"),
        **tables,
        **{name: pd.read_parquet(directory / f"{name}.parquet") for name in OPTIONAL_FRAMES if (directory / f"{name}.parquet").exists()},
    )


def read_table(path: Path) -> pd.DataFrame:
    """A table, with the ``;``-joined id columns kept as text."""
    if not path.is_file():
        raise TracelinkError(f"{path}: missing from the profile directory")
    text_columns = ["root_ops", "producer_ops", "source_lines", "root_of", "producer_in", "lines", "ops", "call_site_ids"]
    frame = pd.read_csv(path, dtype={c: str for c in text_columns}, keep_default_na=False, na_values=[""])
    return frame.fillna({c: "" for c in text_columns if c in frame})
