"""A throw-away PostgreSQL cluster for the store tests and benchmarks (when CI has not started one).

`PYDANTIC_AI_CITATIONS_POSTGRES_DSN` names a running server (`.ci/run` starts one); without it, `throwaway_cluster`
runs Debian's `initdb` / `pg_ctl` (as the `postgres` user when this process is root: PostgreSQL refuses root) in a
temporary directory, on 127.0.0.1 and a free port, and stops it afterwards. `PYDANTIC_AI_CITATIONS_REQUIRE_POSTGRES=1`
turns "no server" into a failure instead of a skip.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Generator
from pathlib import Path

DSN_VAR = 'PYDANTIC_AI_CITATIONS_POSTGRES_DSN'
REQUIRE_VAR = 'PYDANTIC_AI_CITATIONS_REQUIRE_POSTGRES'


class NoServer(Exception):
    """Why no PostgreSQL server is available."""


def _bin_dir() -> Path:
    found = shutil.which('initdb')
    if found:
        return Path(found).parent
    candidates = sorted(Path('/usr/lib/postgresql').glob('*/bin/initdb'))
    if not candidates:
        raise NoServer("PostgreSQL's initdb is not installed (apt-get install postgresql)")
    return candidates[-1].parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def throwaway_cluster(*, durable: bool = False) -> Generator[str, None, None]:
    """Start a cluster, yield its DSN, stop and remove it. Raises `NoServer` with the reason when it cannot.

    Tests run it without flushing to disk (`fsync=off`); `durable=True` keeps PostgreSQL's defaults, every commit
    flushed, as a production server and the SQLite baseline of the store benchmark do.
    """
    try:
        importlib.import_module('psycopg')
    except ImportError as e:
        raise NoServer(f'psycopg is not installed ({e})') from e
    bin_dir = _bin_dir()
    root = Path(tempfile.mkdtemp(prefix='pac-pg-'))
    as_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which('runuser') is None:
            raise NoServer('running as root without runuser: PostgreSQL refuses to run as root')
        shutil.chown(root, 'postgres')
        as_user = ['runuser', '-u', 'postgres', '--']
    data, port = root / 'data', _free_port()

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*as_user, *args], check=True, capture_output=True, timeout=120)

    try:
        try:
            run(str(bin_dir / 'initdb'), '-D', str(data), '--auth=trust', '-U', 'postgres', '-E', 'UTF8')
            options = f'-c listen_addresses=127.0.0.1 -p {port} -k {root}'
            if not durable:
                options += ' -c fsync=off -c full_page_writes=off'
            run(str(bin_dir / 'pg_ctl'), '-D', str(data), '-w', '-l', str(root / 'log'), '-o', options, 'start')
        except (subprocess.SubprocessError, OSError) as e:
            stderr = getattr(e, 'stderr', b'') or b''
            raise NoServer(f'could not start PostgreSQL: {e} {stderr.decode(errors="replace")[-300:]}') from e
        try:
            yield f'host=127.0.0.1 port={port} user=postgres dbname=postgres'
        finally:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                run(str(bin_dir / 'pg_ctl'), '-D', str(data), '-m', 'immediate', 'stop')
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fresh_schema(dsn: str) -> str:
    """A new empty schema on the server; the DSN whose connections use it (each test starts from nothing)."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    name = f't_{uuid.uuid4().hex[:12]}'
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL('CREATE SCHEMA {}').format(sql.Identifier(name)))
    return make_conninfo(dsn, options=f'-c search_path={name}')
