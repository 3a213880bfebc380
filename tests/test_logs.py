"""Structured JSON logs: one object per line, the request id from context, secrets masked."""

from __future__ import annotations

import io
import json
import logging

from ustun import logs


def _capture(level: str = "info") -> io.StringIO:
    stream = io.StringIO()
    logs.configure(level, stream)
    return stream


def test_a_record_is_one_json_line_with_extras() -> None:
    stream = _capture()
    logging.getLogger("ustun.test").info("hello %s", "world", extra={"attempt": 3})
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["level"] == "info"
    assert entry["logger"] == "ustun.test"
    assert entry["message"] == "hello world"
    assert entry["attempt"] == 3
    assert entry["time"].endswith("+00:00")
    assert "request_id" not in entry


def test_records_inside_a_request_carry_its_id() -> None:
    stream = _capture()
    token = logs.bind_request_id("req_abc")
    try:
        logging.getLogger("ustun.test").warning("inside")
    finally:
        logs.reset_request_id(token)
    logging.getLogger("ustun.test").warning("outside")
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["request_id"] == "req_abc"
    assert "request_id" not in outside


def test_keys_and_secrets_never_reach_the_log() -> None:
    stream = _capture()
    key = "ustun_sk_" + "A" * 43
    secret = "whsec_" + "c2VjcmV0c2VjcmV0c2VjcmV0"
    signing_key = "whsk_" + "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U="
    logging.getLogger("ustun.test").info(
        "got %s and %s",
        key,
        signing_key,
        extra={"headers": {"authorization": "Bearer " + key}, "secret": secret},
    )
    text = stream.getvalue()
    assert key not in text
    assert secret.removeprefix("whsec_") not in text
    assert signing_key.removeprefix("whsk_") not in text
    assert "ustun_sk_***" in text


def test_exceptions_are_kept_in_one_line() -> None:
    stream = _capture()
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("ustun.test").exception("failed")
    (line,) = stream.getvalue().splitlines()
    assert "ValueError: boom" in json.loads(line)["exception"]


def test_level_filters_records() -> None:
    stream = _capture("warning")
    logging.getLogger("ustun.test").info("quiet")
    assert stream.getvalue() == ""
