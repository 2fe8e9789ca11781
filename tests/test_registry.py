"""``resolve("module:name")``, the one way the registries reach code above them."""
import pytest

from metacog_fast._registry import resolve
from metacog_fast.envs.probe import PROBES
from metacog_fast.envs.registry import ENV_FACTORIES


def test_resolves_module_and_name() -> None:
    import os.path

    assert resolve("os.path:join") is os.path.join


@pytest.mark.parametrize("spec", ["os.path", "os.path:", ":join", "os:path:join"])
def test_malformed_spec_names_the_argument(spec: str) -> None:
    with pytest.raises(ValueError, match="spec: expected 'module:name'"):
        resolve(spec)


def test_missing_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        resolve("os.path:no_such_function")


def test_registry_strings_are_well_formed() -> None:
    for spec in [*ENV_FACTORIES.values(), *PROBES.values()]:
        module, _, name = spec.partition(":")
        assert module.startswith("metacog_fast.") and name.isidentifier(), spec
