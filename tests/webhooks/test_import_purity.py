"""`import ustun.webhooks` works with only `pip install ustun` (no server dependencies)."""

import subprocess
import sys

SERVER_ONLY = ["sqlalchemy", "aiohttp", "fastapi", "starlette", "redis", "cryptography", "pydantic"]


def test_verify_imports_no_server_dependency() -> None:
    code = (
        "import sys; from ustun.webhooks import verify, Secret, InvalidSignature; "
        f"print([m for m in {SERVER_ONLY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_broker_clients_are_imported_only_when_a_broker_is_used() -> None:
    """`ustun[brokers]` is optional: the dispatcher side and the consumers load without it."""
    code = (
        "import sys; import ustun.webhooks.brokers, ustun.webhooks.receiving.consumers, "
        "ustun.webhooks.receiving.receiver; "
        "print([m for m in ('aio_pika', 'aiormq', 'nats') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
