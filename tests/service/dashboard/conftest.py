"""Fixtures of the dashboard tests: the app, and a cookie-keeping client like a browser."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from ustun.service import create_app
from ustun.settings import Settings
from ustun.store import Database


@pytest.fixture
async def app(settings: Settings, db: Database) -> AsyncIterator[FastAPI]:
    application = create_app(settings, db=db)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client that keeps cookies and is not logged in."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as http:
        yield http
