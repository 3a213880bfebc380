from ustun.http.etag import version_etag


def test_version_etag_is_a_quoted_strong_tag() -> None:
    assert version_etag(1) == '"1"'
    assert version_etag(42) != version_etag(43)
