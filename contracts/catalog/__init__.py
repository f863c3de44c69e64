"""The contracts, one module per area; every module here is imported by the registry."""
