"""ustun.django's webhooks in the example shop, on both databases: `endpoints.create`, events
delivered by `manage.py ustun_worker` and verified with the `standardwebhooks` package, the
receiver view (`hooks`: verify, record the id once, handle in the same transaction), and the
admin's pages and Retry action."""

from __future__ import annotations

import base64
import json
import re
import sys
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from django_support import Shop
from example_shops import Served
from support import sync_connection, wait_for

# The secret the shop's receiver (`POST /webhooks`) takes, as its sender would have given it.
SHOP_SECRET = "whsec_" + base64.b64encode(b"the-shop-receiver-secret-32-byte").decode()
FORGER_SECRET = "whsec_" + base64.b64encode(b"a-secret-the-shop-never-gave-out").decode()
PAYMENT = {"amount": 100, "currency": "EUR"}
# How long the worker may take to send (it polls on SQLite; a loaded machine runs it late).
WORKER_WAIT = 60.0


@dataclass(frozen=True)
class Request:
    headers: dict[str, str]
    body: bytes


class Endpoint:
    """A webhook endpoint on a local port, in a thread: records each request, answers
    `status`."""

    def __init__(self) -> None:
        self.received: list[Request] = []
        self.status = 200
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                endpoint.received.append(Request(dict(self.headers.items()), body))
                self.send_response(endpoint.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def __enter__(self) -> Endpoint:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def served(shop: Shop) -> Served:
    """The shop under gunicorn with its receiver's secret, and its worker. A failed delivery's
    next try is an hour away: only the admin's Retry sends it sooner."""
    shop.env["SHOP_WEBHOOK_SECRET"] = SHOP_SECRET
    shop.env["USTUN_WEBHOOK_RETRY_SCHEDULE"] = "3600"
    shop.start(sys.executable, "manage.py", "ustun_worker", log="worker.log")
    return shop.serve()


def shell(shop: Shop, code: str) -> Any:
    """Run `code` in `manage.py shell`; the JSON it printed last."""
    done = shop.manage("shell", "-c", code)
    return json.loads(done.stdout.strip().splitlines()[-1])


def query(shop: Shop, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of `sql` (`%s` placeholders) read straight from the shop's database."""
    with sync_connection(shop.database_url) as conn, conn.cursor() as cursor:
        if conn.dialect.name == "sqlite":
            sql = sql.replace("%s", "?")
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def register(shop: Shop, user: str, url: str, *, superuser: str = "") -> dict[str, str]:
    """`endpoints.create` for `user`'s account (as the shop's views name it: the user's pk),
    and a superuser `superuser` when named; the endpoint's id and secret."""
    make_superuser = (
        f"User.objects.create_superuser({superuser!r}, password={superuser!r} * 2)"
        if superuser
        else "None"
    )
    code = (
        "import json; from django.contrib.auth.models import User; "
        "from ustun.django import endpoints; "
        f"{make_superuser}; "
        f"owner = str(User.objects.get(username={user!r}).pk); "
        f"print(json.dumps(endpoints.create(owner, {url!r}, ['payment.*'])._asdict()))"
    )
    created: dict[str, str] = shell(shop, code)
    return created


def signed(secret: str, webhook_id: str, body: str) -> dict[str, str]:
    """The Standard Webhooks headers of `body`, signed now with `secret`."""
    now = datetime.now(tz=UTC)
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(webhook_id, now, body),
        "content-type": "application/json",
    }


def pay(client: httpx.Client, path: str = "/payments") -> httpx.Response:
    return client.post(path, json=PAYMENT, headers={"Idempotency-Key": str(uuid.uuid4())})


def test_an_event_reaches_the_endpoint_signed_and_a_failed_view_emits_nothing(
    shop: Shop, served: Served
) -> None:
    with Endpoint() as endpoint:
        created = register(shop, "ann", endpoint.url)
        assert created["secret"].startswith("whsec_")
        with served.client("ann") as client:
            # The view writes a payment and emits its event, then raises: neither commits.
            assert pay(client, "/faults/raise").status_code == 500
            paid = pay(client)
        assert paid.status_code == 201, paid.text

        [request] = wait_for(
            lambda: endpoint.received, timeout=WORKER_WAIT, what="the event at the endpoint"
        )
        event = Webhook(created["secret"]).verify(request.body, request.headers)
        assert event["type"] == "payment.created"
        assert event["data"] == paid.json()
        sent = query(
            shop,
            "SELECT e.id, d.endpoint_id FROM webhook_events e "
            "JOIN webhook_deliveries d ON d.event_id = e.id WHERE d.endpoint_id = %s",
            created["id"],
        )
        assert sent == [(event["id"], created["id"])]


def test_an_endpoint_is_checked_capped_and_written_in_the_callers_transaction(
    shop: Shop,
) -> None:
    """The service's URL rules and endpoint quota; an endpoint made in a transaction that rolls
    back does not exist."""
    code = """
import json
from django.db import transaction
from django.test import override_settings
from ustun.django import endpoints
from ustun.django.admin_models import WebhookEndpoint
from ustun.errors import ProblemError

refused = []

def refuse(url, event_types=("*",)):
    try:
        endpoints.create("capped", url, event_types)
    except ProblemError as exc:
        fields = [e["field"] for e in exc.extensions.get("errors", ())]
        refused.append(":".join([exc.slug, *fields]))

refuse("ftp://example.com/hooks")
refuse("https://example.com/hooks", ["Payment Created"])
with override_settings(USTUN={"MAX_ENDPOINTS": 1, "WEBHOOK_ALLOW_PRIVATE": True}):
    try:
        with transaction.atomic():
            endpoints.create("capped", "http://127.0.0.1:9/rolled-back")
            raise RuntimeError("the caller's transaction rolls back")
    except RuntimeError:
        pass
    kept = endpoints.create("capped", "http://127.0.0.1:9/kept")
    refuse("http://127.0.0.1:9/one-too-many")
urls = list(WebhookEndpoint.objects.filter(account__name="capped").values_list("url", flat=True))
print(json.dumps({"refused": refused, "urls": urls, "kept": kept.id}))
"""
    found = shell(shop, code)
    assert found["refused"] == [
        "validation-error:body.url",
        "validation-error:body.events",
        "quota-exceeded",
    ]
    assert found["urls"] == ["http://127.0.0.1:9/kept"]
    assert found["kept"].startswith("we_")


def test_the_receiver_refuses_a_forged_signature_and_runs_a_replay_once(
    shop: Shop, served: Served
) -> None:
    body = json.dumps({"id": "evt_receiver", "type": "payment.created", "data": PAYMENT})
    url = f"{served.url}/webhooks"
    forged = httpx.post(url, content=body, headers=signed(FORGER_SECRET, "msg_receiver", body))
    assert forged.status_code == 401
    assert forged.headers["content-type"] == "application/problem+json"
    assert forged.json()["type"].endswith("/webhook-signature-invalid")
    unsigned = httpx.post(url, content=body, headers={"content-type": "application/json"})
    assert unsigned.status_code == 401

    headers = signed(SHOP_SECRET, "msg_receiver", body)
    assert httpx.post(url, content=body, headers=headers).status_code == 204
    replayed = httpx.post(url, content=body, headers=headers)
    assert (replayed.status_code, replayed.json()) == (200, {"duplicate": True})
    recorded = "SELECT type, data FROM hooks_received WHERE event_id = %s"
    [(event_type, data)] = query(shop, recorded, "evt_receiver")
    assert (event_type, json.loads(data) if isinstance(data, str) else data) == (
        "payment.created",
        PAYMENT,
    )


def test_a_handler_that_raises_leaves_the_id_free_for_the_retry(shop: Shop) -> None:
    """The handler's writes and the inbox row roll back together: 500, then the sender's
    retry runs the handler again, and a third delivery is a duplicate."""
    code = f"""
import json
from datetime import UTC, datetime
from django.test import RequestFactory
from standardwebhooks import Webhook
from hooks.models import Received
from ustun.django import receiver

def flaky(event):
    Received.objects.create(event_id=event["id"], type=event["type"], data=event["data"])
    ran.append(event["id"])
    if len(ran) == 1:
        raise RuntimeError("the handler failed after writing")

ran = []
view = receiver({{"order.*": flaky}}, secret={SHOP_SECRET!r})
body = json.dumps({{"id": "evt_flaky", "type": "order.paid", "data": {{}}}})
now = datetime.now(tz=UTC)
headers = {{
    "HTTP_WEBHOOK_ID": "msg_flaky",
    "HTTP_WEBHOOK_TIMESTAMP": str(int(now.timestamp())),
    "HTTP_WEBHOOK_SIGNATURE": Webhook({SHOP_SECRET!r}).sign("msg_flaky", now, body),
}}
factory = RequestFactory()
statuses = [
    view(factory.post("/webhooks", body, content_type="application/json", **headers)).status_code
    for _ in range(3)
]
rows = Received.objects.filter(event_id="evt_flaky").count()
print(json.dumps({{"statuses": statuses, "ran": ran, "rows": rows}}))
"""
    ran = shell(shop, code)
    assert ran == {"statuses": [500, 204, 200], "ran": ["evt_flaky", "evt_flaky"], "rows": 1}


def _login(client: httpx.Client, user: str) -> None:
    client.get("/admin/login/")
    answer = client.post(
        "/admin/login/",
        data={
            "username": user,
            "password": user * 2,
            "next": "/admin/",
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
    )
    assert answer.status_code == 302, answer.text


def _delivery(shop: Shop, endpoint_id: str) -> tuple[str, str, int]:
    found = "SELECT id, status, attempt_count FROM webhook_deliveries WHERE endpoint_id = %s"
    rows = query(shop, found, endpoint_id)
    return rows[0] if rows else ("", "", 0)


def test_the_admin_lists_webhooks_and_retries_a_failed_delivery(shop: Shop, served: Served) -> None:
    with Endpoint() as endpoint:
        endpoint.status = 500
        created = register(shop, "bob", endpoint.url, superuser="root")
        with served.client("bob") as client:
            assert pay(client).status_code == 201
        delivery_id, _, _ = wait_for(
            lambda: (row := _delivery(shop, created["id"]))[1] == "failed" and row,
            timeout=WORKER_WAIT,
            what="the delivery to fail",
        )

        with httpx.Client(base_url=served.url, timeout=30) as admin:
            _login(admin, "root")
            for page in ("webhookendpoint", "webhookevent", "webhookdelivery"):
                listed = admin.get(f"/admin/ustun/{page}/")
                assert listed.status_code == 200, page
                assert created["secret"] not in listed.text
            assert created["id"] in admin.get("/admin/ustun/webhookendpoint/").text
            detail = admin.get(f"/admin/ustun/webhookdelivery/{delivery_id}/change/")
            assert detail.status_code == 200
            assert re.search(r'class="field-status_code">\s*<p>500</p>', detail.text)
            shown = admin.get(f"/admin/ustun/webhookendpoint/{created['id']}/change/").text
            assert created["secret"] not in shown
            assert "field-secret" not in shown

            endpoint.status = 200
            retried = admin.post(
                "/admin/ustun/webhookdelivery/",
                data={
                    "action": "retry",
                    "_selected_action": delivery_id,
                    "csrfmiddlewaretoken": admin.cookies["csrftoken"],
                },
            )
            assert retried.status_code == 302, retried.text
            wait_for(
                lambda: _delivery(shop, created["id"]) == (delivery_id, "succeeded", 2),
                timeout=WORKER_WAIT,
                what="the retried delivery to succeed",
            )
        assert len(endpoint.received) == 2
