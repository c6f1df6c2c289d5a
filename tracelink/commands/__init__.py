"""The commands: each a thin layer that parses its arguments, calls the pipeline and the stages, and prints."""
