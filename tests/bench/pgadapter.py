"""The PostgreSQL gateway's protocol adapter alone (gateway/postgres/connection.py, real sockets, TLS both legs,
SCRAM), with every statement allowed at once by an in-process judge: what the wire protocol costs before any
decision. For tests/bench/postgres.py.

Usage: python tests/bench/pgadapter.py DATA_DIR LISTEN_PORT UPSTREAM_HOST:PORT UPSTREAM_CA PASSWORD"""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gateway.postgres.connection import GatewayDeps, Login  # noqa: E402
from gateway.sessions.database import make_verifier  # noqa: E402
from gateway.postgres.judge import StatementRequest, Verdict  # noqa: E402
from gateway.postgres.registry import ConnectionRegistry  # noqa: E402
from gateway.postgres.server import PostgresGateway, server_tls  # noqa: E402
from gateway.config import parse_database  # noqa: E402
from gateway.runtime.eventloop import loop_factory  # noqa: E402

USER, PLACEHOLDER = "s_bench000000000000", "bench-placeholder"
ALLOW = Verdict("t_bench", "allow", (), ())


class Logins:
    def __init__(self) -> None:
        self.login = Login(USER, make_verifier(PLACEHOLDER), ("prod",), True)

    async def login_of(self, user: str) -> Login | None:
        return self.login if user == USER else None


class AllowAll:
    async def decide(self, request: StatementRequest) -> Verdict:
        return ALLOW

    def stamp(self, session: str) -> object:
        return None

    async def wait(self, approval_id: str, timeout_s: float) -> str:
        return "denied"

    async def withdraw(self, approval_id: str, reason: str) -> None:
        return None


class Count:
    statements = 0

    def statement(self, *args, **kw) -> None:
        Count.statements += 1


class Sessions:
    async def live(self, sid: str) -> dict:
        return {"id": sid}


async def main(data_dir: str, port: int, upstream: str, ca: str, password: str) -> None:
    db = parse_database("prod", {"upstream": upstream, "dbname": "app", "user": "app", "password": "env:X",
                                 "upstream_ca": ca})

    async def real_password(_db) -> str:
        return password
    deps = GatewayDeps(databases={"prod": db}, logins=Logins(), password=real_password, judge=AllowAll(),
                       recorder=Count(), registry=ConnectionRegistry(), tls=server_tls(Path(data_dir), "127.0.0.1"))
    gateway = PostgresGateway(deps, Sessions())  # type: ignore[arg-type]
    await gateway.start(("127.0.0.1", port))
    print("adapter ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]),
                loop_factory=loop_factory())
