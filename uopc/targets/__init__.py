"""Compilation targets, one folder each: the renderer, the artifact builder and the launcher."""
