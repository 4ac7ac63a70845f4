"""The claim check's payload store in PostgreSQL: what every host of a deployment whose stores are
databases shares, where a folder would be one host's. Payloads are kept by their SHA-256 in the
store schema's `payloads` table (migration 0004), written once and never changed."""

from __future__ import annotations

import asyncio

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from core.errors import ErrorCode, ThreadlineError

from .locate import postgres_url
from .migrate import migrate
from .pgsql import async_checked, reachable


class PostgresBlobs:
    """Payload bytes in a PostgreSQL schema, through a small pool opened on first use."""

    def __init__(self, url: str, *, max_size: int = 4) -> None:
        self._url, self.schema = postgres_url(url)
        self._max_size = max_size
        self._pool: AsyncConnectionPool | None = None
        self._opening = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<PostgresBlobs schema={self.schema}>"  # never the URL: it may hold a password

    async def put(self, key: str, data: bytes) -> None:
        """Keep `data` under `key`, committed before returning (nothing when it is there already)."""
        query = sql.SQL("INSERT INTO {}.payloads (key, data) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING")
        with reachable():
            async with (await self._connections()).connection() as conn:
                await conn.execute(query.format(sql.Identifier(self.schema)), (key, data))

    async def get(self, key: str) -> bytes:
        """The bytes under `key`.

        Raises:
            ThreadlineError: `store-invalid` when the payload store does not hold them.
        """
        query = sql.SQL("SELECT data FROM {}.payloads WHERE key = %s").format(sql.Identifier(self.schema))
        with reachable():
            async with (await self._connections()).connection() as conn:
                row = await (await conn.execute(query, (key,))).fetchone()
        if row is None:
            message = f"payload {key[:19]}… is not in the payload store; check THREADLINE_PAYLOADS on every process"
            raise ThreadlineError(ErrorCode.STORE_INVALID, message)
        return bytes(row[0])

    async def close(self) -> None:
        """Close the pool, if it was opened."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _connections(self) -> AsyncConnectionPool:
        async with self._opening:
            if self._pool is None:
                await asyncio.to_thread(migrate, self._url, schema=self.schema)
                check = async_checked(lambda: pool)
                pool = AsyncConnectionPool(self._url, min_size=1, max_size=self._max_size, open=False, check=check)
                with reachable():
                    await pool.open(wait=True, timeout=10)
                self._pool = pool
        return self._pool
