import pytest

from ustun.webhooks.patterns import is_pattern, matches


@pytest.mark.parametrize(
    ("patterns", "event_type", "expected"),
    [
        (["*"], "payment.created", True),
        (["payment.*"], "payment.succeeded", True),
        (["payment.*"], "payments.created", False),
        (["payment.*"], "transfer.completed", False),
        (["transfer.completed"], "transfer.completed", True),
        (["payment.created"], "payment.created.v2", False),
        ([], "payment.created", False),
    ],
)
def test_matches(patterns: list[str], event_type: str, expected: bool) -> None:
    assert matches(patterns, event_type) is expected


@pytest.mark.parametrize("text", ["*", "payment.*", "payment.created", "a.b_c.d"])
def test_valid(text: str) -> None:
    assert is_pattern(text)


@pytest.mark.parametrize("text", ["", "payment*", "*.created", "Payment.created", "a..b", "**"])
def test_invalid(text: str) -> None:
    assert not is_pattern(text)
