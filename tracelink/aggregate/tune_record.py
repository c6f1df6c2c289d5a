"""The tune record's former place: it is :mod:`tracelink.profile_dir.tune_record`, part of the profile
directory's schema. Only ``tracelink/commands/tune.py`` and ``tracelink/tune/remote.py`` still import these
names from here; this module goes once they import them from there."""

from tracelink.profile_dir.tune_record import RECORDS_FILE, TRIALS_FILE, RecordLog

__all__ = ["RECORDS_FILE", "TRIALS_FILE", "RecordLog"]
