"""Versions and their strong ETags: round trip, and tags that are not ours match nothing."""

from ustun.concurrency import Version, new_generation


def test_version_tags_round_trip_and_reject_foreign_ones() -> None:
    version = Version(7, "0123456789abcdef")
    assert str(version.etag) == '"7.0123456789abcdef"'
    assert Version.from_opaque(version.etag.opaque) == version
    assert Version.from_opaque("7") == Version(7)
    for foreign in ("", "0", "07", "x", "7.", "7.ABCDEF0123456789", "2147483648", "-1"):
        assert Version.from_opaque(foreign) is None
    assert Version.from_opaque("2147483647") == Version(2**31 - 1)


def test_generations_are_random_hex() -> None:
    made = {new_generation() for _ in range(100)}
    assert len(made) == 100
    assert all(len(g) == 16 and int(g, 16) >= 0 for g in made)
