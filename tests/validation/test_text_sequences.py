"""A parameter typed as a sequence of texts (`Sequence[str]`, `Iterable[str]`, ...) refuses one string,
package-wide: Python takes "abc" for a sequence of strings, which would be read character by character."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headsup_lens._typecheck import _build_check, _runtime_hint, _text_only_as_collection, checked_function

from .test_type_checks import CALLABLES, parameter_hints


def text_sequence_parameters() -> list[tuple[str, object, str]]:
    """(name, callable, parameter) of every public parameter whose annotation admits a string only
    as a collection of strings."""
    from beartype import BeartypeConf

    conf = BeartypeConf(is_pep484_tower=True)
    found = []
    for name, fn in CALLABLES:
        for parameter, hint in parameter_hints(fn).items():
            if _text_only_as_collection(_runtime_hint(hint), conf):
                found.append((name, fn, parameter))
    return found


PARAMETERS = text_sequence_parameters()


def test_the_text_sequence_parameters_are_found():
    names = {f"{name.rsplit('.', 1)[-1]}.{parameter}" for name, _, parameter in PARAMETERS}
    for expected in (
        "rouge_l.predictions",
        "paper_bleu.references",
        "score_outputs.outputs",
    ):
        assert expected in names, expected
    assert len(PARAMETERS) >= 20


@pytest.mark.parametrize(
    "name, fn, parameter", PARAMETERS, ids=[f"{name}.{parameter}" for name, _, parameter in PARAMETERS]
)
def test_one_string_is_refused_where_a_sequence_of_texts_is_typed(name, fn, parameter):
    target = fn.__init__ if inspect.isclass(fn) else fn
    check = checked_function(inspect.unwrap(target))
    takes_self = "self" in inspect.signature(inspect.unwrap(target)).parameters
    with pytest.raises(TypeError, match=f"argument {parameter}='abc' .* one string is not accepted as a sequence"):
        check(*((object(),) if takes_self else ()), **{parameter: "abc"})


def texts(values: Sequence[str]) -> int:
    return len(values)


def text_or_texts(values: str | Sequence[str]) -> int:
    return len(values)


def maybe_texts(values: Iterable[str] | None = None) -> int:
    return 0 if values is None else len(list(values))


@given(text=st.text(), items=st.lists(st.text(), max_size=4))
def test_the_rule(text, items):
    assert checked_function(texts)(items) == len(items) == checked_function(maybe_texts)(items)
    assert checked_function(texts)(tuple(items)) == len(items)
    assert checked_function(text_or_texts)(text) == len(text)  # a string is allowed where it is typed
    assert checked_function(maybe_texts)(None) == 0
    for fn in (texts, maybe_texts):
        with pytest.raises(TypeError, match="one string is not accepted as a sequence"):
            checked_function(fn)(text)


def test_a_hint_without_a_collection_keeps_its_check():
    check = _build_check(texts)
    check(([],), {})
    with pytest.raises(TypeError, match="does not have the type it needs"):
        check(([1, 2],), {})
