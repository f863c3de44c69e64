"""The packaged contract run: one test per registered contract (see `dspark-contracts check`)."""
