"""The assertions every meta-test makes of a contract that caught a bug put back into an engine (the reference's
mutants, the bugs re-inserted into SGLang and vLLM)."""

from contracts.violation import is_engine_crash


def assert_caught(violation, contract, engine) -> None:
    """The violation is this contract's on this engine, and its repro line replays it there; the shrunk case passes
    on the engine as it is when called (the intact one), so the failure was the bug's. A fixed-scenario contract has
    no case to replay."""
    name = engine.name
    # The contract's own check, not a catch-all for an engine exception: a bug that only crashes proves nothing.
    assert not is_engine_crash(violation.what), f"caught by an engine exception, not by the contract: {violation}"
    assert violation.contract_id == contract.id and violation.engine == name, str(violation)
    assert f"'{name}'" in violation.repro or f"--engine {name}" in violation.repro, violation.repro
    if contract.cases is not None:
        assert violation.case is not None
        contract.check(engine, violation.case)
