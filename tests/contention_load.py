"""Account B's side of the contention test, in a process of its own (so its client's CPU is not
the measuring client's): `CONCURRENCY` transfers at a time back and forth between two ledger
accounts, until stdin closes; then prints the count of each status as JSON.

    python tests/contention_load.py BASE_URL API_KEY LEDGER_1 LEDGER_2 CONCURRENCY
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

import aiohttp


async def main(base_url: str, api_key: str, first: str, second: str, concurrency: int) -> None:
    statuses: dict[int, int] = {}
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_reader(sys.stdin.fileno(), stopping.set)
    connector = aiohttp.TCPConnector(limit=concurrency)
    headers = {"authorization": f"Bearer {api_key}"}
    async with aiohttp.ClientSession(base_url, headers=headers, connector=connector) as http:

        async def transfers(n: int) -> None:
            source, target = (first, second) if n % 2 else (second, first)
            body = {"from": source, "to": target, "amount": 1, "currency": "EUR"}
            while not stopping.is_set():
                key = {"idempotency-key": str(uuid.uuid4())}
                async with http.post("/v1/transfers", json=body, headers=key) as response:
                    await response.read()
                    statuses[response.status] = statuses.get(response.status, 0) + 1

        print("started", flush=True)
        await asyncio.gather(*(transfers(n) for n in range(concurrency)))
    print(json.dumps(statuses), flush=True)


if __name__ == "__main__":
    url, key, ledger_1, ledger_2, count = sys.argv[1:6]
    asyncio.run(main(url, key, ledger_1, ledger_2, int(count)))
