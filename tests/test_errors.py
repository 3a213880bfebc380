"""`ustun.errors`: one exception tree, and its drawing lists every exception ustun defines."""

from __future__ import annotations

import errno
import importlib
import inspect
import pkgutil
import re

import pytest

import ustun
from ustun import errors
from ustun.errors import UstunError
from ustun.idempotency import LeaseLost


def _exceptions() -> dict[str, type[BaseException]]:
    """Every public exception class defined in a ustun module, by its qualified name."""
    found: dict[str, type[BaseException]] = {}
    for module in pkgutil.walk_packages(ustun.__path__, "ustun."):
        if ".migrations" in module.name:  # Alembic scripts run migrations when imported
            continue
        if module.name.startswith("ustun.django."):  # its models need a configured project
            continue
        for name, value in vars(importlib.import_module(module.name)).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.name
                and not name.startswith("_")
            ):
                found[f"{module.name}.{name}"] = value
    return found


EXCEPTIONS = _exceptions()
TREE = {"UstunError", *re.findall(r"[├└]── (\w+)", errors.__doc__ or "")}


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_exception_is_a_ustun_error_drawn_in_the_tree(name: str) -> None:
    cls = EXCEPTIONS[name]
    assert issubclass(cls, UstunError), f"{name} must derive from UstunError"
    assert cls.__name__ in TREE, f"draw {name} in ustun.errors' docstring"


def test_the_drawing_names_only_exceptions_that_exist() -> None:
    assert {cls.__name__ for cls in EXCEPTIONS.values()} >= TREE


def test_ustun_errors_exports_the_tree_it_defines() -> None:
    defined = {name for name in EXCEPTIONS if name.startswith("ustun.errors.")}
    assert {f"ustun.errors.{name}" for name in errors.__all__} == defined


def test_a_refused_address_is_also_an_os_error_for_aiohttp() -> None:
    refused = errors.RefusedAddress("a loopback address")
    assert isinstance(refused, OSError)
    assert refused.errno == errno.EACCES
    assert str(refused) == "[Errno 13] refused: a loopback address"


def test_there_is_one_lease_lost() -> None:
    assert LeaseLost is errors.LeaseLost
