"""Plain dataclasses that cross the adapter boundary, one module per level."""
