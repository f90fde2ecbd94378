"""The test suite. `shape_checker` is the type checker of jaxtyping's import hook (pyproject's
`--jaxtyping-packages`): beartype with the numeric tower the package's own checks use (an int passes
for a float), so the tests refuse exactly the types a user's call is refused for, and add the shapes."""

import functools


@functools.cache
def _checker():
    from beartype import BeartypeConf, beartype

    return beartype(conf=BeartypeConf(is_pep484_tower=True))


def shape_checker(fn, *args, **kwargs):
    return _checker()(fn, *args, **kwargs)
