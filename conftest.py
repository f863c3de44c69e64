# The contracts' pytest plugin: markers, Hypothesis profiles, --engine, the contract table.
pytest_plugins = ["contracts.plugin", "pytester"]
