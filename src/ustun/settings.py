"""The one settings object: every setting from the environment with the `USTUN_` prefix."""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ustun.defaults import (
    DEFAULT_AUTH_FAILURE_LIMIT,
    DEFAULT_AUTH_FAILURE_WINDOW,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_DATABASE_URL,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_HOST,
    DEFAULT_IDEMPOTENCY_LEASE,
    DEFAULT_IDEMPOTENCY_MAX_BYTES,
    DEFAULT_IDEMPOTENCY_TTL,
    DEFAULT_JOB_LEASE,
    DEFAULT_JOB_POLL_INTERVAL,
    DEFAULT_JOB_RETENTION,
    DEFAULT_JOB_RETRY_BASE,
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_LOG_LEVEL,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_ENDPOINTS,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADERS,
    DEFAULT_MAX_PENDING_JOBS,
    DEFAULT_MAX_REQUESTS_IN_FLIGHT,
    DEFAULT_MAX_STREAMS,
    DEFAULT_MAX_STREAMS_PER_ACCOUNT,
    DEFAULT_PORT,
    DEFAULT_RATE_BURST,
    DEFAULT_RATE_LIMIT,
    DEFAULT_SIGNATURE_TOLERANCE,
    DEFAULT_STATEMENT_TIMEOUT,
    DEFAULT_TEST_PINGS_PER_MINUTE,
    DEFAULT_WEBHOOK_CIRCUIT_COOLDOWN,
    DEFAULT_WEBHOOK_CIRCUIT_FAILURES,
    DEFAULT_WEBHOOK_LEASE,
    DEFAULT_WEBHOOK_PAYLOAD_RETENTION,
    DEFAULT_WEBHOOK_RETRY_SCHEDULE,
    DEFAULT_WEBHOOK_TIMEOUT,
)
from ustun.http.ratelimit import MAX_SF_INTEGER
from ustun.store.engine import async_url

MIN_SECRET_KEY_LENGTH = 32
# The circuit breaker's bounds: at most 1,000 failed attempts in a row; a cool-down from 0.1 s
# (shorter would probe about as often as no breaker retries) to a day.
MAX_CIRCUIT_FAILURES = 1_000
MIN_CIRCUIT_COOLDOWN = 0.1
MAX_CIRCUIT_COOLDOWN = 86_400
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def reveal(secret: SecretStr | None) -> str | None:
    """The value of a secret setting, for the code that uses it (never for messages or logs)."""
    return None if secret is None else secret.get_secret_value()


class Settings(BaseSettings):
    """Service settings; durations are in seconds. Tests may shorten any of them."""

    model_config = SettingsConfigDict(env_prefix="USTUN_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    # PostgreSQL's statement_timeout and lock_timeout on every connection that serves (0: none).
    statement_timeout: float = Field(default=DEFAULT_STATEMENT_TIMEOUT, ge=0)
    lock_timeout: float = Field(default=DEFAULT_LOCK_TIMEOUT, ge=0)
    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65_535)
    # The service's URL as receivers reach it (behind a proxy: the proxy's); see `public_base_url`.
    public_url: str | None = None
    idempotency_ttl: float = Field(default=DEFAULT_IDEMPOTENCY_TTL, gt=0)
    idempotency_lease: float = Field(default=DEFAULT_IDEMPOTENCY_LEASE, gt=0)
    # Bytes of stored idempotent answers one account may keep (0: no limit).
    idempotency_max_bytes: int = Field(default=DEFAULT_IDEMPOTENCY_MAX_BYTES, ge=0)
    webhook_retry_schedule: str = ",".join(str(s) for s in DEFAULT_WEBHOOK_RETRY_SCHEDULE)
    webhook_timeout: float = Field(default=DEFAULT_WEBHOOK_TIMEOUT, gt=0)
    webhook_allow_private: bool = False
    webhook_lease: float = Field(default=DEFAULT_WEBHOOK_LEASE, gt=0)
    # An endpoint's circuit breaker (`ustun.webhooks.circuit`): consecutive failed attempts that
    # open it (0: no breaker), and the seconds it stays open before one delivery probes it.
    webhook_circuit_failures: int = Field(
        default=DEFAULT_WEBHOOK_CIRCUIT_FAILURES, ge=0, le=MAX_CIRCUIT_FAILURES
    )
    webhook_circuit_cooldown: float = Field(
        default=DEFAULT_WEBHOOK_CIRCUIT_COOLDOWN,
        ge=MIN_CIRCUIT_COOLDOWN,
        le=MAX_CIRCUIT_COOLDOWN,
        allow_inf_nan=False,
    )
    # Days an event's payload and its attempts' response bodies are kept (`webhooks.retention`).
    webhook_payload_retention: float = Field(
        default=DEFAULT_WEBHOOK_PAYLOAD_RETENTION, gt=0, allow_inf_nan=False
    )
    max_endpoints: int = Field(default=DEFAULT_MAX_ENDPOINTS, ge=1)
    test_pings_per_minute: int = Field(default=DEFAULT_TEST_PINGS_PER_MINUTE, ge=1)
    max_pending_jobs: int = Field(default=DEFAULT_MAX_PENDING_JOBS, ge=1)
    max_streams_per_account: int = Field(default=DEFAULT_MAX_STREAMS_PER_ACCOUNT, ge=1)
    max_streams: int = Field(default=DEFAULT_MAX_STREAMS, ge=1)
    signature_tolerance: int = Field(default=DEFAULT_SIGNATURE_TOLERANCE, ge=0)
    secret_key: SecretStr | None = None
    # The key being rotated away from: it still opens stored secrets (see `ustun rotate-key`).
    secret_key_previous: SecretStr | None = None
    # `ustun listen`'s signing secret, kept off the command line (where `ps` shows it).
    listen_secret: SecretStr | None = None
    # `ustun reconcile`'s API key at the provider, kept off the command line likewise.
    reconcile_api_key: SecretStr | None = None
    log_level: str = DEFAULT_LOG_LEVEL
    job_lease: float = Field(default=DEFAULT_JOB_LEASE, gt=0)
    job_poll_interval: float = Field(default=DEFAULT_JOB_POLL_INTERVAL, gt=0)
    job_retry_base: float = Field(default=DEFAULT_JOB_RETRY_BASE, ge=0)
    job_retention: float = Field(default=DEFAULT_JOB_RETENTION, gt=0)
    max_body: int = Field(default=DEFAULT_MAX_BODY, ge=1)
    # Comma-separated modules imported by every worker so that they can register job kinds.
    job_modules: str = ""
    # Comma-separated IPs/CIDRs of reverse proxies whose X-Forwarded-Proto/-For are believed.
    trusted_proxies: str = ""
    auth_failure_limit: int = Field(default=DEFAULT_AUTH_FAILURE_LIMIT, ge=1)
    auth_failure_window: float = Field(default=DEFAULT_AUTH_FAILURE_WINDOW, gt=0)
    # Requests one account may make a second in one process (0: no limit), in bursts of at most
    # `rate_burst` (see `ustun.http.ratelimit`).
    rate_limit: float = Field(default=DEFAULT_RATE_LIMIT, ge=0, allow_inf_nan=False)
    rate_burst: int = Field(default=DEFAULT_RATE_BURST, ge=1, le=MAX_SF_INTEGER)
    # Requests of one account one process works on at once (0: no cap); the rest wait their
    # turn (see `ustun.service.plumbing.in_flight`).
    max_requests_in_flight: int = Field(default=DEFAULT_MAX_REQUESTS_IN_FLIGHT, ge=0)
    # What `ustun serve` takes from one connection (see `ustun.service.runtime.server`).
    max_header_bytes: int = Field(default=DEFAULT_MAX_HEADER_BYTES, ge=1)
    max_headers: int = Field(default=DEFAULT_MAX_HEADERS, ge=1)
    header_timeout: float = Field(default=DEFAULT_HEADER_TIMEOUT, gt=0)
    body_timeout: float = Field(default=DEFAULT_BODY_TIMEOUT, gt=0)
    keep_alive_timeout: int = Field(default=DEFAULT_KEEP_ALIVE_TIMEOUT, ge=1)

    @field_validator("webhook_retry_schedule")
    @classmethod
    def _schedule_is_numbers(cls, value: str) -> str:
        try:
            delays = [float(part) for part in value.split(",") if part.strip()]
        except ValueError:
            raise ValueError("must be comma-separated seconds, e.g. 5,300,1800") from None
        if any(d < 0 for d in delays):
            raise ValueError("delays must not be negative")
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url_is_absolute(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an absolute http(s) URL, e.g. https://api.example.com")
        if parts.query or parts.fragment:
            raise ValueError(
                "may not carry a query (?…) or a fragment (#…): it is a base that paths are "
                "added to, e.g. https://api.example.com/ustun"
            )
        return value.rstrip("/")

    @field_validator("database_url")
    @classmethod
    def _database_url_supported(cls, value: str) -> str:
        async_url(value)  # raises ValueError naming what is wrong, never the URL (a password)
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level_known(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value

    @field_validator("secret_key", "secret_key_previous")
    @classmethod
    def _secret_key_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_SECRET_KEY_LENGTH:
            raise ValueError(f"must be at least {MIN_SECRET_KEY_LENGTH} characters")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, value: str) -> str:
        for part in _items(value):
            try:
                ipaddress.ip_network(part, strict=False)
            except ValueError:
                raise ValueError(f"not an IP address or CIDR network: {part!r}") from None
        return value

    @property
    def proxies(self) -> list[str]:
        """The trusted proxies' addresses and networks."""
        return _items(self.trusted_proxies)

    @property
    def public_base_url(self) -> str:
        """The base of the absolute URLs the service hands out (a thin webhook's `data.url`).

        `USTUN_PUBLIC_URL`, or else `http://{host}:{port}` of `ustun serve`.
        """
        if self.public_url is not None:
            return self.public_url
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def payload_retention_seconds(self) -> float:
        """`webhook_payload_retention` (days) in seconds, as the retention sweeper takes it."""
        return self.webhook_payload_retention * 86_400

    @property
    def retry_schedule(self) -> tuple[float, ...]:
        """The webhook retry delays as numbers."""
        return tuple(float(p) for p in self.webhook_retry_schedule.split(",") if p.strip())


# Unprefixed names other tools read, which ustun reads only as USTUN_<name>.
_UNPREFIXED = ("DATABASE_URL", "PORT", "SECRET_KEY")


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each `USTUN_*` variable that is no setting (with the setting it likely
    misspells), and for each well-known unprefixed name set where its `USTUN_` one is not."""
    prefix = "USTUN_"
    settings = [name.upper() for name in Settings.model_fields]
    warnings = []
    for variable in sorted(environ):
        name = variable.upper()  # read regardless of case
        if name.startswith(prefix) and name.removeprefix(prefix) not in settings:
            close = difflib.get_close_matches(name.removeprefix(prefix), settings, n=1)
            guess = f": did you mean {prefix}{close[0]}?" if close else ""
            warnings.append(f"{variable} is not a ustun setting and is ignored{guess}")
    given = {variable.upper() for variable in environ}
    for name in _UNPREFIXED:
        if name in environ and prefix + name not in given:
            warnings.append(
                f"{name} is set but ignored: ustun reads {prefix}{name} "
                f"(e.g. {prefix}{name}=${name})"
            )
    return warnings


def _items(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]
