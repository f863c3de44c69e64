"""Adapters: each converts boundary dataclasses to one engine's objects and back."""
