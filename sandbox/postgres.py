"""A throwaway PostgreSQL for the shared-state tests and the backend benchmark, as a team's state
database would be set up (docs/state-backend.md), on loopback.

Debian's server binaries (`make setup` installs them, creating no cluster and starting no service); a
cluster of its own in the system's temporary folder (vllm-fleet-postgres-PORT), made with initdb and run
with pg_ctl as the `postgres` system user (the server refuses to run as root; it must reach the cluster's
folder, which it cannot below a checkout in a private folder such as `mktemp -d` makes); listening on 127.0.0.1 only, with TLS from a CA made
for it, so clients connect with sslmode=verify-full; the state role logs in with a password
(scram-sha-256) kept in a 0600 passfile, never in the URL; the administrator only over the cluster's
own unix socket. The database and the role come from scripts/state-db.sql, the one docs/state-backend.md names.
`stop()` stops the server and removes the cluster: nothing is left running or on disk.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from sandbox.processes import free_port, run_captured

ROOT = Path(__file__).resolve().parent.parent
STATE_SQL = ROOT / "scripts" / "state-db.sql"
ROLE = "vllm_fleet_state"
DATABASE = "vllm_fleet_state"
SYSTEM_USER = "postgres"


class PostgresMissing(RuntimeError):
    pass


def bin_dir() -> Path:
    """The newest installed server's binaries (Debian: /usr/lib/postgresql/VERSION/bin)."""
    found = sorted(
        (p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")), key=lambda p: int(p.parent.name)
    )
    if not found or not shutil.which("psql"):
        raise PostgresMissing("PostgreSQL's server binaries are not installed: run `make setup`")
    return found[-1]


class Cluster:
    def __init__(self, port: int | None = None, parent: Path | None = None) -> None:
        self.bin = bin_dir()
        self.port = port or free_port()
        self.dir = (parent or Path(tempfile.gettempdir())) / f"vllm-fleet-postgres-{self.port}"
        self.data = self.dir / "data"
        self.sock = self.dir / "sock"
        self.ca = self.dir / "tls" / "ca.crt"
        self.passfile = self.dir / "pgpass"
        self.password = secrets.token_urlsafe(24)

    # ---- what clients use -------------------------------------------------------------------------

    def url(self, table: str | None = None) -> str:
        """The backend URL: no password (it is in the passfile); TLS verified against the cluster's CA."""
        extra = f"&table={table}" if table else ""
        return (
            f"postgres://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"
            f"?sslmode=verify-full&sslrootcert={self.ca}&connect_timeout=5{extra}"
        )

    def client_env(self) -> dict[str, str]:
        return {"PGPASSFILE": str(self.passfile)}

    # ---- life cycle -------------------------------------------------------------------------------

    def start(self) -> Cluster:
        """Make the cluster, its TLS files, the role and the database, and start the server."""
        if self.dir.exists():
            raise RuntimeError(f"{self.dir} exists: another cluster uses port {self.port}")
        self.dir.mkdir(parents=True)
        self.sock.mkdir()
        self._tls()
        shutil.chown(self.dir, SYSTEM_USER)
        shutil.chown(self.sock, SYSTEM_USER)
        self._as_postgres(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8",
            "--auth-local=peer", "--auth-host=reject", "--no-instructions",
        )  # fmt: skip
        (self.data / "pg_hba.conf").write_text(
            "# vllm-fleet test cluster: the administrator on the unix socket, the state role over TLS only.\n"
            "local all postgres peer\n"
            f"hostssl {DATABASE} {ROLE} 127.0.0.1/32 scram-sha-256\n"
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.sock}'\n"
                f"ssl = on\nssl_cert_file = '{self.dir}/tls/server.crt'\nssl_key_file = '{self.dir}/tls/server.key'\n"
                "password_encryption = 'scram-sha-256'\nmax_connections = 40\nshared_buffers = '32MB'\n"
            )
        self.start_server()
        self.admin(STATE_SQL.read_text(), variables={"role": ROLE, "db": DATABASE})
        self.admin(f"ALTER ROLE {ROLE} PASSWORD '{self.password}';")
        self.passfile.write_text(f"127.0.0.1:{self.port}:{DATABASE}:{ROLE}:{self.password}\n")
        self.passfile.chmod(0o600)
        return self

    def start_server(self) -> None:
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"), "-w", "-t", "60",
            "start",
        )  # fmt: skip

    def stop_server(self) -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "-m", "fast", "stop")

    def running(self) -> bool:
        status = subprocess.run(
            ["runuser", "-u", SYSTEM_USER, "--", str(self.bin / "pg_ctl"), "-D", str(self.data), "status"],
            capture_output=True,
            check=False,
        )
        return status.returncode == 0

    def stop(self) -> None:
        """Stop the server (if it runs) and remove the cluster."""
        if self.data.exists() and self.running():
            self.stop_server()
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.dir)

    # ---- queries ----------------------------------------------------------------------------------

    def admin(self, sql: str, database: str = "postgres", variables: dict[str, str] | None = None) -> str:
        """Run SQL as the administrator over the cluster's socket; rows as `a|b` lines."""
        args = [f"--set={k}={v}" for k, v in (variables or {}).items()]
        return self._as_postgres(
            "psql", "-h", str(self.sock), "-p", str(self.port), "-d", database, "-X", "-q", "-A", "-t",
            "-v", "ON_ERROR_STOP=1", *args, stdin=sql,
        )  # fmt: skip

    def as_role(self, sql: str) -> subprocess.CompletedProcess[str]:
        """Run SQL as the state role, over TCP and TLS as the engine connects (for privilege checks)."""
        dsn = f"host=127.0.0.1 port={self.port} dbname={DATABASE} user={ROLE} sslmode=verify-full sslrootcert={self.ca}"
        return run_captured(
            ["psql", dsn, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"],
            input=sql,
            env={"PATH": "/usr/bin:/bin", **self.client_env()},
        )

    # ---- internals --------------------------------------------------------------------------------

    def _as_postgres(self, *command: str, stdin: str | None = None) -> str:
        result = run_captured(["runuser", "-u", SYSTEM_USER, "--", *command], input=stdin, cwd=self.dir, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{Path(command[0]).name} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    def _tls(self) -> None:
        """A CA of this cluster's own, and a server certificate for 127.0.0.1 it signs."""
        tls = self.dir / "tls"
        tls.mkdir()

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=tls, check=True, capture_output=True)

        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=vllm-fleet test state CA")  # fmt: skip
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")  # fmt: skip
        (tls / "san.ext").write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.crt", "-days", "2", "-extfile", "san.ext")  # fmt: skip
        (tls / "ca.key").unlink()  # nothing else is ever signed
        for path in (tls, *tls.iterdir()):
            shutil.chown(path, SYSTEM_USER)
        (tls / "server.key").chmod(0o600)


def main() -> int:
    """Start one by hand for a look: `python -m sandbox.postgres` (Ctrl-C stops and removes it)."""
    cluster = Cluster().start()
    print(f"PULUMI_BACKEND_URL={cluster.url()}\nPGPASSFILE={cluster.passfile}\n(Ctrl-C stops and removes it)")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
