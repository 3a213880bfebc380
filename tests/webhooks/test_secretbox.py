import os
import stat
from pathlib import Path

import pytest

from ustun.errors import SecretKeyError
from ustun.webhooks.secretbox import SecretBox, master_key


def test_seal_open_round_trip_bound_to_context() -> None:
    box = SecretBox("k" * 32)
    sealed = box.seal("whsec_abc", context="we_1")
    assert "whsec_abc" not in sealed
    assert box.open(sealed, context="we_1") == "whsec_abc"
    with pytest.raises(SecretKeyError):
        box.open(sealed, context="we_2")
    with pytest.raises(SecretKeyError, match="USTUN_SECRET_KEY"):
        SecretBox("x" * 32).open(sealed, context="we_1")


def test_generated_once_beside_sqlite_with_owner_only_mode(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ustun.db'}"
    first = master_key(None, url)
    assert master_key(None, url) == first
    path = tmp_path / "ustun.db.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert master_key("given-key-" * 4, url) == "given-key-" * 4


def test_postgresql_refuses_without_a_key() -> None:
    with pytest.raises(SecretKeyError, match="USTUN_SECRET_KEY is not set"):
        master_key(None, "postgresql://postgres@127.0.0.1/ustun")


def test_a_rotating_box_opens_under_either_key_and_seals_under_the_current_one() -> None:
    old, new = "o" * 32, "n" * 32
    sealed_before = SecretBox(old).seal("whsec_abc", context="we_1")
    rotating = SecretBox(new, previous=old)
    assert rotating.open(sealed_before, context="we_1") == "whsec_abc"
    sealed_now = rotating.seal("whsec_abc", context="we_1")
    assert SecretBox(new).open(sealed_now, context="we_1") == "whsec_abc"
    with pytest.raises(SecretKeyError):
        SecretBox(old).open(sealed_now, context="we_1")
    with pytest.raises(SecretKeyError):
        SecretBox(new, previous="p" * 32).open(sealed_before, context="we_1")


def test_an_unwritable_key_file_is_a_secret_key_error(tmp_path: Path) -> None:
    with pytest.raises(SecretKeyError, match=r"cannot create the key file .* set USTUN_SECRET_KEY"):
        master_key(None, f"sqlite:///{tmp_path / 'missing' / 'ustun.db'}")
