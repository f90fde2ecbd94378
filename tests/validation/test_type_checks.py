"""Every public function, method and config field of the package refuses a wrong-typed argument with
a TypeError that names the parameter (run-time checks from the annotations, `_typecheck`)."""

from __future__ import annotations

import importlib
import inspect
import typing

import pytest
import typing_extensions

import headsup_lens
from headsup_lens._typecheck import _MARK, _runtime_hint, checked_function

PACKAGES = [
    "headsup_lens",
    *(
        f"headsup_lens.{name}"
        for name in (
            "analysis",
            "data",
            "demo",
            "evaluation",
            "explorer",
            "gates",
            "masks",
            "models",
            "objective",
            "organism",
            "plots",
            "reproduce",
            "sft",
            "training",
        )
    ),
]


class Wrong:
    """An argument of a type no annotation in the package allows."""

    def __repr__(self) -> str:
        return "<Wrong>"


def public_names(module) -> list[str]:
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    return sorted(names)


def public_callables() -> list[tuple[str, object]]:
    """(qualified name, callable) of every public function, class constructor and public method."""
    found: dict[str, object] = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in public_names(module):
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not str(getattr(obj, "__module__", "")).startswith("headsup_lens"):
                continue
            if inspect.isclass(obj):
                if issubclass(obj, BaseException) or typing_extensions.is_typeddict(obj):
                    continue  # a TypedDict declares keyword options: checked where they are taken (below)
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
                for member, value in vars(obj).items():
                    if member.startswith("_") or isinstance(value, property):
                        continue
                    if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)):
                        found[f"{obj.__module__}.{obj.__qualname__}.{member}"] = getattr(obj, member)
            elif callable(obj):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return sorted(found.items())


def parameter_hints(fn) -> dict[str, object]:
    """Each type-checked parameter of `fn` and its annotation; a `**options: Unpack[Options]`
    parameter contributes each of its options."""
    target = fn.__init__ if inspect.isclass(fn) else fn
    raw = inspect.unwrap(target)
    hints = typing.get_type_hints(raw)
    found: dict[str, object] = {}
    for parameter in inspect.signature(raw).parameters.values():
        hint = hints.get(parameter.name)
        if parameter.kind is parameter.VAR_KEYWORD and typing.get_origin(hint) is typing_extensions.Unpack:
            found.update(typing.get_type_hints(typing.get_args(hint)[0]))
            continue
        if parameter.name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if hint is None or hint in (typing.Any, object) or isinstance(hint, typing.TypeVar):
            continue
        found[parameter.name] = hint
    return found


def checkable_parameters(fn) -> list[str]:
    return list(parameter_hints(fn))


CALLABLES = public_callables()


def test_the_surface_is_walked():
    names = [name for name, _ in CALLABLES]
    assert len(names) > 100
    for expected in ("removal_sweep", "TrainConfig", "Task.from_pairs", "HeadMask.load", "evaluate", "load_task"):
        assert any(n.endswith(expected) for n in names), expected


@pytest.mark.parametrize("name, fn", CALLABLES, ids=[name for name, _ in CALLABLES])
def test_a_wrong_type_is_a_type_error_naming_the_parameter(name, fn):
    target = fn.__init__ if inspect.isclass(fn) else fn
    assert getattr(target, _MARK, False), f"{name} is not type-checked"
    # The check itself, on the plain function (the tests' jaxtyping hook wraps the package's functions
    # once more and would first complain about the arguments left out here).
    check = checked_function(inspect.unwrap(target))
    takes_self = "self" in inspect.signature(inspect.unwrap(target)).parameters
    for parameter in checkable_parameters(fn):
        with pytest.raises(TypeError) as caught:
            check(*((object(),) if takes_self else ()), **{parameter: Wrong()})
        assert f"{parameter}=<Wrong>" in str(caught.value), (parameter, str(caught.value))


def test_shapes_are_not_checked_at_run_time_only_types():
    import torch
    from jaxtyping import Float

    assert _runtime_hint(Float[torch.Tensor, "n_layers n_heads"]) is torch.Tensor
    assert _runtime_hint(Float[torch.Tensor, "n_layers n_heads"] | None) == typing.Optional[torch.Tensor]  # noqa: TID251, UP045 (the old spelling on purpose)


def test_the_ones_the_issue_named():
    from headsup_lens.analysis._common import check_heads
    from headsup_lens.models import load_model

    with pytest.raises(TypeError, match="steps"):
        headsup_lens.TrainConfig(steps=10.5)
    with pytest.raises(TypeError, match="pairs"):
        headsup_lens.Task("t", (("a", "b"), ("c", 3)))
    model = load_model("organism", device="cpu")
    with pytest.raises(TypeError):
        headsup_lens.removal_sweep(model, "abc", [(0, 1), (1, 1.5)])
    with pytest.raises(TypeError, match="must be an integer"):  # every pair, not a sampled one
        inspect.unwrap(check_heads)(model, [(0, 1)] * 50 + [(1, 1.5)])


def test_a_public_name_is_the_same_object_everywhere():
    """Type checks are applied where a function is defined: the public name, the subpackage's name and
    the defining module's name are one object, so internal calls are checked as well."""
    from headsup_lens.analysis import _sweep
    from headsup_lens.masks import _head_mask

    assert headsup_lens.removal_sweep is headsup_lens.analysis.removal_sweep is _sweep.removal_sweep
    assert headsup_lens.HeadMask is _head_mask.HeadMask
    assert getattr(_sweep.removal_sweep, _MARK, False)


def test_internal_calls_are_checked_too():
    """A wrong type reaching a public function from inside the package is caught where it enters."""
    from headsup_lens.analysis import _sweep

    with pytest.raises(TypeError, match="order"):
        _sweep.sweep_masks(Wrong(), [0], (2, 2))


def test_no_helper_leaks_into_the_public_namespace():
    assert dir(headsup_lens) == headsup_lens.__all__
    assert not hasattr(headsup_lens, "attach_stub") and "lazy_loader" not in dir(headsup_lens)


def test_shared_keyword_options_are_checked_by_name_and_type():
    """`**options: Unpack[SplitOptions]` (the options `answer_loss`, `generations` and `accuracy` share,
    declared once): an unknown option is refused with the list of options, a wrong type names it."""
    from headsup_lens.evaluation import accuracy

    check = checked_function(inspect.unwrap(accuracy))
    with pytest.raises(
        TypeError, match=r"accuracy\(\) got an unexpected keyword argument 'aplha'; its options are mask, alpha"
    ):
        check(object(), object(), aplha=0.5)
    with pytest.raises(
        TypeError, match=r"accuracy\(\): argument alpha='x' \(str\) does not have the type it needs: float"
    ):
        check(alpha="x")


@pytest.mark.parametrize(("name", "options"), [("value_gate", "alpha, mlp, mean"), ("gated", "alpha, mlp, mean, gate")])
def test_the_gates_context_managers_check_their_keyword_options(name, options):
    """`value_gate` and `gated` take `**options: Unpack[...]` (declared once beside their hooks
    functions): a misspelt option is refused before any hook, with the options listed."""
    from headsup_lens import gates

    check = checked_function(inspect.unwrap(getattr(gates, name)))
    with pytest.raises(
        TypeError, match=rf"{name}\(\) got an unexpected keyword argument 'aplha'; its options are {options}$"
    ):
        check(object(), None, aplha=0.5)
    with pytest.raises(
        TypeError, match=rf"{name}\(\): argument alpha='x' \(str\) does not have the type it needs: float"
    ):
        check(alpha="x")


def test_the_export_lists_are_the_one_declaration():
    """No exported name is decorated by hand: being exported is what makes it checked, so the two
    cannot drift apart (`@checked` stays for public names that no export list takes)."""
    import ast
    from pathlib import Path

    from headsup_lens._typecheck import exported_names

    root = Path(headsup_lens.__file__).parent
    decorated = [
        f"{path.relative_to(root)}:{node.name}"
        for path in sorted(root.rglob("*.py"))
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
        and node.name in exported_names()
        and any(isinstance(d, ast.Name) and d.id == "checked" for d in node.decorator_list)
    ]
    assert decorated == []


def test_a_module_loaded_later_is_checked_as_it_loads():
    """The checks come from the import of the defining module itself, not from first use of a public
    name: a fresh import of a module checks its exports before anything can import from it."""
    import importlib
    import sys

    name = "headsup_lens.analysis._sweep"
    saved = sys.modules.pop(name)
    try:
        fresh = importlib.import_module(name)
        assert fresh is not saved
        assert getattr(fresh.removal_sweep, _MARK, False)
        assert not getattr(fresh._run_steps, _MARK, False)  # a private helper is left as it is
    finally:  # the package's own module again, for every later test
        sys.modules[name] = saved
        headsup_lens.analysis._sweep = saved


def test_what_an_export_list_takes_is_checked_where_it_is_defined_and_nothing_else():
    """A name re-exported through a private module is checked in the module that defines it; a
    private helper that only shares an exported name (the organism trainer's `collate`, a method
    registered as `activation_pattern`) is left as it is."""
    from headsup_lens.analysis._methods import _base, _gradients
    from headsup_lens.data import _tokenize
    from headsup_lens.organism import _trainer

    assert getattr(_tokenize.answer_positions, _MARK, False)  # exported by objective, from data._tokenize
    assert getattr(_base.head_scores, _MARK, False)  # exported by analysis, through analysis._methods
    assert headsup_lens.objective.answer_positions is _tokenize.answer_positions
    assert not getattr(_trainer.collate, _MARK, False)  # `headsup_lens.data.collate` is another function
    assert not getattr(_gradients.activation_pattern, _MARK, False)
