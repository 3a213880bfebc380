"""`ustun.settings`: defaults from `ustun.defaults`, and the public URL a thin webhook's `data.url`
is built on."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ustun import defaults
from ustun.settings import Settings, unknown_variables

VALUED = sorted(
    name for name, field in Settings.model_fields.items() if field.default not in (None, "", False)
)


@pytest.mark.parametrize("name", VALUED)
def test_every_default_is_named_in_ustun_defaults(name: str) -> None:
    value = getattr(defaults, f"DEFAULT_{name.upper()}")
    if isinstance(value, tuple):  # a list setting: comma-separated in the environment
        value = ",".join(str(item) for item in value)
    assert Settings.model_fields[name].default == value


def test_the_public_url_defaults_to_where_the_service_listens() -> None:
    assert Settings(host="10.0.0.5", port=9000).public_base_url == "http://10.0.0.5:9000"
    assert Settings(host="::1", port=8000).public_base_url == "http://[::1]:8000"


def test_the_public_url_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USTUN_PUBLIC_URL", "https://api.example.com/ustun/")
    assert Settings().public_base_url == "https://api.example.com/ustun"


@pytest.mark.parametrize("url", ["/v1", "api.example.com", "ftp://api.example.com"])
def test_a_public_url_that_is_not_an_absolute_http_url_is_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="absolute http"):
        Settings(public_url=url)


@pytest.mark.parametrize("url", ["https://api.example.com/?a=1", "https://api.example.com/#top"])
def test_a_public_url_with_a_query_or_fragment_is_refused_for_that_reason(url: str) -> None:
    """It was refused as "not an absolute URL", which it is."""
    with pytest.raises(ValidationError, match=r"may not carry a query \(\?…\) or a fragment"):
        Settings(public_url=url)


def test_unknown_ustun_variables_are_named_with_the_setting_they_misspell() -> None:
    warned = unknown_variables(
        {"USTUN_DB_URL": "x", "ustun_prot": "1", "USTUN_FROBNICATE": "1", "USTUN_PORT": "1"}
    )
    assert warned == [
        "USTUN_DB_URL is not a ustun setting and is ignored: did you mean USTUN_DATABASE_URL?",
        "USTUN_FROBNICATE is not a ustun setting and is ignored",
        "ustun_prot is not a ustun setting and is ignored: did you mean USTUN_PORT?",
    ]


def test_a_well_known_unprefixed_name_is_named_unless_its_ustun_variable_is_set() -> None:
    assert unknown_variables({"DATABASE_URL": "x", "PORT": "1", "USTUN_PORT": "2"}) == [
        "DATABASE_URL is set but ignored: ustun reads USTUN_DATABASE_URL "
        "(e.g. USTUN_DATABASE_URL=$DATABASE_URL)"
    ]


def test_every_setting_is_a_known_variable() -> None:
    assert unknown_variables({f"USTUN_{name.upper()}": "" for name in Settings.model_fields}) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_header_bytes", 0),
        ("max_headers", 0),
        ("header_timeout", 0),
        ("body_timeout", -1),
        ("keep_alive_timeout", 0.5),
    ],
)
def test_a_server_limit_out_of_range_is_refused(name: str, value: float) -> None:
    with pytest.raises(ValidationError, match=name):
        Settings(**{name: value})
