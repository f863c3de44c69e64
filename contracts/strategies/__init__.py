"""Hypothesis strategies that generate boundary cases, one module per level."""
