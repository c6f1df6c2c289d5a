"""Provenance stage: map every dispatch call site back to the input ops it came from."""
