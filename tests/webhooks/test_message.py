import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ustun.webhooks.sending import message

MOMENT = datetime(2026, 6, 1, 12, 30, 5, 123456, tzinfo=UTC)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner) | st.dictionaries(TEXT, inner),
    max_leaves=20,
)


@given(st.dictionaries(TEXT, JSON), st.sampled_from([message.FULL, message.THIN]))
def test_a_body_from_the_stored_text_has_the_same_bytes(data: dict[str, Any], payload: str) -> None:
    stored = message.stored_data(data)
    url = "https://api.example/v1/payments/pay_1"
    expected = message.body(
        "evt_1", "payment.created", MOMENT, data, payload=payload, object_url=url
    )
    spliced = message.stored_body(
        "evt_1", "payment.created", MOMENT, stored, payload=payload, object_url=url
    )
    assert spliced == expected


def test_a_body_is_compact_json_with_data_last() -> None:
    spliced = message.stored_body("evt_1", "payment.created", MOMENT, '{"id":"pay_1"}')
    assert spliced == (
        b'{"id":"evt_1","type":"payment.created","created_at":"2026-06-01T12:30:05.123Z",'
        b'"api_version":"2026-12-01","data":{"id":"pay_1"}}'
    )


def test_a_thin_url_is_absolute_under_the_public_url() -> None:
    data = {"id": "pay_1", "amount": 5}
    thin = message.body(
        "evt_1",
        "payment.created",
        MOMENT,
        data,
        payload=message.THIN,
        object_url="/v1/payments/pay_1",
        base_url="https://api.example.com/ustun/",
    )
    assert json.loads(thin)["data"] == {
        "id": "pay_1",
        "url": "https://api.example.com/ustun/v1/payments/pay_1",
    }


def test_an_event_about_no_object_is_sent_full_to_a_thin_endpoint() -> None:
    data = {"endpoint_id": "we_1"}
    thin = message.stored_body(
        "evt_1", "ping", MOMENT, message.stored_data(data), payload=message.THIN
    )
    assert json.loads(thin)["data"] == data
