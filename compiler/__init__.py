"""Tessera: a compiler for tile accelerators (see DESIGN.md and README.md)."""
