"""Loading the DeepSpec pack: its declarations read without the engine, and a missing or unexpected tree or
transformers version refused with one line naming what to set or run. Runs everywhere (nothing here imports DeepSpec)."""

import importlib.metadata

import pytest

from contracts.adapters.deepspec import env as deepspec_env

SPEC = "contracts.adapters.deepspec:DeepSpecAdapter"


def test_the_pack_reads_without_the_engine():
    from contracts.engines import pack_class

    cls = pack_class(SPEC)
    assert cls.name == "deepspec" and cls.tested_versions == (deepspec_env.DEEPSPEC_COMMIT,)
    assert {"verify", "step"} <= cls.capabilities and "draft" not in cls.capabilities


def test_absent_or_unexpected_tree_fails_fast_naming_the_variable(monkeypatch, tmp_path):
    from contracts.engines import EngineLoadError, load_engine

    monkeypatch.setenv(deepspec_env.PATH_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(EngineLoadError) as caught:
        load_engine("contracts.adapters.deepspec:DeepSpecAdapter")
    message = str(caught.value)
    assert "DeepSpec tree not found" in message and deepspec_env.PATH_ENV in message and "\n" not in message
    (tmp_path / "other").mkdir()
    monkeypatch.setenv(deepspec_env.PATH_ENV, str(tmp_path / "other"))
    with pytest.raises(EngineLoadError, match=r"is not a DeepSpec tree the pack knows \(missing deepspec/eval/"):
        load_engine("contracts.adapters.deepspec:DeepSpecAdapter")



def test_a_wrong_transformers_version_names_the_install_script(monkeypatch):
    from contracts.engines import EngineLoadError, load_engine

    if not (deepspec_env.deepspec_root() / "deepspec").is_dir():
        pytest.skip("no DeepSpec tree here: the tree check answers first")
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "5.24.0" if name == "transformers" else real(name))
    with pytest.raises(EngineLoadError, match=r"transformers 5\.24\.0 is installed but DeepSpec needs 5\.10\.2: run "
                                              r"`bash scripts/install_deepspec.sh`"):
        load_engine(SPEC)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", True])
def test_a_bad_confidence_threshold_names_the_field(bad):
    from contracts.adapters.deepspec import DeepSpecAdapter

    with pytest.raises(ValueError, match=r"^confidence_threshold: in \[0, 1\]"):
        DeepSpecAdapter(confidence_threshold=bad)


def test_the_threshold_option_is_the_evaluators():
    """EngineSpec.options sets one engine's threshold (check's truncated run); without it, the adapter's own."""
    from contracts.adapters.deepspec.options import ENGINE_OPTIONS, threshold_of

    (opt,) = ENGINE_OPTIONS
    assert (opt.name, opt.kind, opt.same_seed, opt.not_exercised) == ("confidence_threshold", "output-preserving",
                                                                      False, "")
    assert threshold_of(((opt.name, opt.value),), 0.0) == float(opt.value) > 0
    assert threshold_of(((opt.name, opt.off),), 0.5) == 0.0 and threshold_of((), 0.25) == 0.25


@pytest.mark.parametrize("options, why", [((("confidence_threshold", "1.5"),), r"in \[0, 1\]"),
                                          ((("confidence_threshold", "high"),), "a number in"),
                                          ((("temperature", "0"),), "unknown engine option 'temperature'")])
def test_a_bad_threshold_option_names_the_field(options, why):
    from contracts.adapters.deepspec.options import threshold_of

    with pytest.raises(ValueError, match=r"^options: .*" + why):
        threshold_of(options, 0.0)
