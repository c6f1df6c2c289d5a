"""Collectors: run the compiled program (or read a capture) and produce dispatch events.

Every collector lands in the one event schema of :mod:`tracelink.collect.events`.
"""
