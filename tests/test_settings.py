"""`ustun.settings`: defaults from `ustun.defaults`, and the public URL a thin webhook's `data.url`
is built on."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ustun import defaults
from ustun.settings import Settings

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


@pytest.mark.parametrize(
    "url", ["/v1", "api.example.com", "ftp://api.example.com", "https://api.example.com/?a=1"]
)
def test_a_public_url_that_is_not_an_absolute_http_url_is_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="absolute http"):
        Settings(public_url=url)


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
