"""Comparing two profiles of one program: their builds re-run alternately, op by op (:mod:`.diff`)."""
