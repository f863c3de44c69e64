"""What the whole-request contracts (REQ-001..005) find in unmodified SGLang 0.5.23, each shown to be SGLang's.

For every REQ ledger entry of `sglang` and `sglang-pd`: the entry's shrunk case fails on the ledger's field (a case
SGLang's own `SamplingParams.verify` admits: the step level builds every request through it), the entry's own
correction of SGLang's function makes that case pass, and the corrections of every entry of the contract, applied
together, make the whole contract pass at the settings `dspark-contracts check` uses (a contract with two causes,
REQ-002, needs both). `sglang-chain` runs `sglang`'s step level and greedy verify unchanged: its entries are
`sglang`'s, and the cheap ones (REQ-001's shrunk case, REQ-005) run there too. Runs only where sglang 0.5.23 is
installed.
"""

import pytest

from contracts import ledger
from contracts.adapters.sglang import env as sglang_env
from contracts.boundary.engine import EngineSpec, LoopCase, RequestSpec
from contracts.boundary.verify import RequestVerifyCase, RequestVerifyRow
from contracts.engines import load_engine
from contracts.registry import all_contracts
from contracts.runner import _call as check_case  # one case, failures as ContractViolation
from contracts.runner import run_contract
from contracts.violation import ContractViolation

pytestmark = pytest.mark.skipif(sglang_env.sglang_unavailable_reason() is not None,
                                reason=str(sglang_env.sglang_unavailable_reason()))


@pytest.fixture(scope="module")
def engines(sglang_engine, sglang_chain_engine):  # the session fixtures skip without SGLang
    return {"sglang": sglang_engine, "sglang-chain": sglang_chain_engine, "sglang-pd": load_engine("sglang-pd")}


def _case(**request) -> LoopCase:
    """One request, prompt [0], 10 new tokens, on V 5, gamma 1, the oracle drafter (every draft accepted)."""
    spec = EngineSpec(vocab_size=5, gamma=1, drafter="oracle", verify_mode="static", pool_size=16, max_context_len=128)
    return LoopCase(spec, (RequestSpec(0, (0,), request.pop("temperature", 0.0), 10, **request),))


REPETITION = _case(repetition_penalty=2.0)  # greedy: plain decoding [1, 4, 2, 3, 0, ...], DSpark [1, 1, 1, ...]
MIN_NEW = _case(eos_id=0, min_new_tokens=2, logit_bias=((0, 4.0),))  # the EOS, pulled up, is masked for 2 tokens
FREQUENCY_SAMPLED = _case(temperature=1.0, frequency_penalty=2.0)
MIN_P_SAMPLED = _case(temperature=1.0, min_p=0.3)


def _row(request, output, drafts, logits) -> RequestVerifyRow:
    return RequestVerifyRow(RequestSpec(0, (0,), 0.0, 64, **request), output, drafts, logits)


# REQ-005: column 1 reads output [0] plus draft 0, so the penalty lifts token 3 over 0 (SGLang accepts every draft);
# the EOS 0 is masked at column 0 only (output length 1 < 2), where SGLang accepts it.
VERIFY_REPETITION = RequestVerifyCase(4, 3, (_row(dict(eos_id=None, repetition_penalty=2.0), (0,), (0, 0, 0),
                                                  ((0, 0, 0, 0), (1, 0, 0, 1), (0, 0, 0, 0), (0, 0, 0, 0))),))
VERIFY_MIN_NEW = RequestVerifyCase(4, 1, (_row(dict(eos_id=0, min_new_tokens=2), (1,), (0,), ((4, 0, 0, 0), (4, 0, 0, 0))),))

# (engine, contract, shrunk case or None for a contract without cases, the violation's field it fails on)
_REP = "request 0 tokens (repetition_penalty=2.0)"
_MIN_NEW = "request 0 tokens (logit_bias=((0, 4.0),), min_new_tokens=2)"
_FREQ_LAW = "step 0 request 0: target law at column 0 (frequency_penalty=2.0)"
_MIN_P_LAW = "step 0 request 0: target law at column 0 (min_p=0.3)"
_OUTPUT_LAW = "static frac=None vanilla (frequency_penalty=1.5, presence_penalty=0.5): whole output goodness of fit"
_SEEN = "step 0 request 0: tokens the presence/repetition penalties treat as seen"
_V_REP = "row 0 emitted tokens (repetition_penalty=2.0; output [0], drafts [0, 0, 0])"
_V_MIN_NEW = "row 0 emitted tokens (min_new_tokens=2; output [1], drafts [0])"
ENTRIES = [
    ("sglang", "REQ-001", REPETITION, _REP),
    ("sglang", "REQ-001", MIN_NEW, _MIN_NEW),
    ("sglang", "REQ-002", FREQUENCY_SAMPLED, _FREQ_LAW),
    ("sglang", "REQ-002", MIN_P_SAMPLED, _MIN_P_LAW),
    ("sglang", "REQ-003", None, _OUTPUT_LAW),
    ("sglang", "REQ-004", REPETITION, _SEEN),
    ("sglang", "REQ-005", VERIFY_REPETITION, _V_REP),
    ("sglang", "REQ-005", VERIFY_MIN_NEW, _V_MIN_NEW),
    ("sglang-chain", "REQ-001", REPETITION, _REP),
    ("sglang-chain", "REQ-005", VERIFY_REPETITION, _V_REP),
    ("sglang-pd", "REQ-001", MIN_NEW, _MIN_NEW),
    ("sglang-pd", "REQ-002", FREQUENCY_SAMPLED, _FREQ_LAW),
    ("sglang-pd", "REQ-002", MIN_P_SAMPLED, _MIN_P_LAW),
    ("sglang-pd", "REQ-003", None, _OUTPUT_LAW),
    ("sglang-pd", "REQ-004", REPETITION, _SEEN),
]


def _fails_on_its_field(contract, engine, case, field):
    with pytest.raises(ContractViolation) as caught:
        if case is None:
            run_contract(contract, engine, profile="ci")
        else:
            check_case(contract, engine, case)
    entry = ledger.match(ledger.engine_entries(engine, contract.id), caught.value)
    assert entry is not None and caught.value.what == field, str(caught.value)
    return entry


@pytest.mark.parametrize("engine_name, contract_id, case, field", ENTRIES,
                         ids=[f"{e}-{c}-{i}" for i, (e, c, _, _) in enumerate(ENTRIES)])
def test_the_shrunk_case_fails_and_its_correction_passes_it(engines, engine_name, contract_id, case, field):
    engine, contract = engines[engine_name], all_contracts()[contract_id]
    entry = _fails_on_its_field(contract, engine, case, field)
    if case is None:
        return  # no case to replay: the whole contract, corrected, is the next test
    with pytest.MonkeyPatch.context() as mp:
        entry.finding.correction(mp)
        contract.check(engine, case)


# sglang-chain's REQ-001 is sglang's code and costs a real Scheduler's steps: run whole on sglang only.
CORRECTED = sorted({(e, c) for e, c, _, _ in ENTRIES if (e, c) != ("sglang-chain", "REQ-001")})


@pytest.mark.parametrize("engine_name, contract_id", CORRECTED, ids=[f"{e}-{c}" for e, c in CORRECTED])
def test_the_contracts_corrections_make_it_pass(engines, engine_name, contract_id):
    engine, contract = engines[engine_name], all_contracts()[contract_id]
    fixes = {e.finding.correction for e in ledger.engine_entries(engine, contract_id)}
    assert fixes, f"{contract_id} on {engine_name}: no ledger entry"
    with pytest.MonkeyPatch.context() as mp:
        for fix in fixes:
            fix(mp)
        run_contract(contract, engine, profile="ci")


def test_every_request_entry_has_a_shrunk_case():
    """Each REQ ledger entry's field is the field of one of the shrunk cases above (REQ-002's two causes each);
    sglang-chain's entries are sglang's, the engine's name aside."""
    import re
    from dataclasses import replace

    from contracts.adapters.sglang import SGLangAdapter, SGLangChainAdapter, SGLangPdAdapter

    entries = {e for a in (SGLangAdapter, SGLangChainAdapter, SGLangPdAdapter) for e in a.known_failures
               if e.contract_id.startswith("REQ-")}
    chain = {e for e in entries if e.engine == "sglang-chain"}
    assert chain == {replace(e, engine="sglang-chain") for e in entries if e.engine == "sglang"}
    for e in entries - chain:
        assert any(en == e.engine and c == e.contract_id and re.search(e.field, what) for en, c, _, what in ENTRIES), e
    assert {(e.engine, e.contract_id) for e in entries - chain} == {(en, c) for en, c, _, _ in ENTRIES
                                                                    if en != "sglang-chain"}


def test_request_verify_where_the_verify_level_is():
    """request.verify on the engines with sglang's verify level (sglang, sglang-chain), not on sglang-pd's step only."""
    from contracts import protocol
    from contracts.adapters.sglang import SGLangAdapter, SGLangChainAdapter, SGLangPdAdapter

    assert protocol.REQUEST_VERIFY in SGLangAdapter.capabilities & SGLangChainAdapter.capabilities
    assert protocol.REQUEST_VERIFY not in SGLangPdAdapter.capabilities
