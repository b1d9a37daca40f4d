"""Compatibility of Atoll's data plane with the official Python libSQL client.

`libsql-client` (``libsql_client.create_client_sync``) over HTTP: Hrana 1,
``POST <url>v1/execute`` and ``POST <url>v1/batch``. Runs against a live ``atoll dev``
started by ``scripts/compat.sh``, which sets:

    ATOLL_URL    http://127.0.0.1:PORT of the control plane (platform API)
    ATOLL_TOKEN  login token of the instance administrator ``admin``

Databases are created through the platform API (stdlib ``urllib``) in the admin's
personal organization; the client is pointed at the database's ``http_url``
(``http://127.0.0.1:<db port>/db/<db>-admin/``, with the trailing slash the client needs
to resolve ``v1/execute`` under it).

Run: ``python -m unittest -v`` in this directory (scripts/compat.sh does it in a venv).
"""

from __future__ import annotations

import json
import os
import secrets
import unittest
import urllib.error
import urllib.request
from typing import Callable

import libsql_client
from libsql_client import LibsqlError

URL_BASE = os.environ.get("ATOLL_URL", "").rstrip("/")
ADMIN_TOKEN = os.environ.get("ATOLL_TOKEN", "")
ORG = "admin"
if not URL_BASE or not ADMIN_TOKEN:
    raise RuntimeError("ATOLL_URL and ATOLL_TOKEN must be set: run the suite with scripts/compat.sh")

RUN = secrets.token_hex(3)
_counter = 0


def uniq(prefix: str = "py") -> str:
    global _counter
    _counter += 1
    return f"{prefix}-{RUN}-{_counter}"


def api(method: str, path: str, body: object = None) -> dict:
    """Calls the platform API as the admin; fails unless it answers 200."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{URL_BASE}/v1/organizations/{ORG}{path}", data=data, method=method
    )
    request.add_header("authorization", f"Bearer {ADMIN_TOKEN}")
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as e:
        raise AssertionError(
            f"{method} {path} answered {e.code}: {e.read().decode(errors='replace')}"
        ) from None
    return json.loads(text) if text else {}


def new_database(case: unittest.TestCase) -> tuple[str, str]:
    """Creates a database, deleted when `case` ends (databases count against the
    organization's plan quota); returns (name, http_url)."""
    name = uniq()
    created = api("POST", "/databases", {"name": name, "group": "default"})
    case.addCleanup(api, "DELETE", f"/databases/{name}")
    assert created["database"]["Name"] == name, created
    url = api("GET", f"/databases/{name}")["database"]["http_url"]
    assert url.endswith("/"), f"http_url must end with '/': {url}"
    return name, url


def db_token(name: str, authorization: str = "full-access") -> str:
    res = api(
        "POST",
        f"/databases/{name}/auth/tokens?expiration=1h&authorization={authorization}",
    )
    return res["jwt"]


class LibsqlClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.name, self.url = new_database(self)
        self.token = db_token(self.name)
        self.client = self.connect(self.token)

    def connect(self, token: str | None) -> libsql_client.ClientSync:
        client = libsql_client.create_client_sync(url=self.url, auth_token=token)
        self.addCleanup(client.close)
        return client

    def count(self, table: str) -> int:
        return self.client.execute(f"SELECT count(*) FROM {table}").rows[0][0]

    def assertLibsqlError(self, call: Callable[[], object], code: str) -> LibsqlError:
        """Runs `call`, which must raise a LibsqlError with `code`; returns the error.

        Not `assertRaises`: on leaving, it clears the frames of the exception's traceback,
        and with the sync client those include the suspended coroutine of the client's
        event-loop thread, which that kills (every later call then hangs).
        """
        try:
            call()
        except LibsqlError as e:
            self.assertEqual(e.code, code, str(e))
            return e
        self.fail(f"expected a LibsqlError {code}, but the call succeeded")

    # --- execute --------------------------------------------------------------------

    def test_query_right_after_create(self) -> None:
        rs = self.client.execute("SELECT 1 AS one, 'two' AS two")
        self.assertEqual(rs.columns, ("one", "two"))
        self.assertEqual(rs.rows[0].astuple(), (1, "two"))
        self.assertEqual(rs.rows[0]["two"], "two")

    def test_an_empty_result_still_names_its_columns(self) -> None:
        # Issue 32: a query without rows answered no columns (dbapi2's description is
        # built from them).
        self.client.execute("CREATE TABLE e (a TEXT, b INTEGER)")
        rs = self.client.execute("SELECT a, b FROM e")
        self.assertEqual(rs.columns, ("a", "b"))
        self.assertEqual(len(rs.rows), 0)
        rs = self.client.execute("SELECT 1 AS one WHERE 0 = 1")
        self.assertEqual(rs.columns, ("one",))
        [batched] = self.client.batch(["SELECT a, b FROM e"])
        self.assertEqual(batched.columns, ("a", "b"))

    def test_every_value_type_round_trips(self) -> None:
        self.client.execute("CREATE TABLE v (id INTEGER PRIMARY KEY, v)")
        big = secrets.token_bytes(64 * 1024)
        # (value sent, value expected back, SQLite typeof())
        cases = [
            (None, None, "null"),
            (0, 0, "integer"),
            (-1, -1, "integer"),
            (2**53 + 1, 2**53 + 1, "integer"),
            (2**63 - 1, 2**63 - 1, "integer"),
            (-(2**63), -(2**63), "integer"),
            (True, 1, "integer"),
            (False, 0, "integer"),
            (3.141592653589793, 3.141592653589793, "real"),
            (-0.5, -0.5, "real"),
            (1.0, 1.0, "real"),
            (1e308, 1e308, "real"),
            (5e-324, 5e-324, "real"),
            ("", "", "text"),
            ("plain ascii", "plain ascii", "text"),
            ("héllo wörld — ünïcödé", "héllo wörld — ünïcödé", "text"),
            ("🦀 日本語 עברית ﷽ e\u0301", "🦀 日本語 עברית ﷽ e\u0301", "text"),
            ("quotes ' \" \\ and\nnew\tlines\r\n", "quotes ' \" \\ and\nnew\tlines\r\n", "text"),
            ("nul \x00 inside", "nul \x00 inside", "text"),
            (b"\x00\x01\x02\xfd\xfe\xff", b"\x00\x01\x02\xfd\xfe\xff", "blob"),
            (b"", b"", "blob"),
            (bytearray(b"\x09\x08\x07"), b"\x09\x08\x07", "blob"),
            (memoryview(b"view"), b"view", "blob"),
            (big, big, "blob"),
        ]
        for i, (value, _, _) in enumerate(cases):
            rs = self.client.execute("INSERT INTO v (id, v) VALUES (?, ?)", [i, value])
            self.assertEqual(rs.rows_affected, 1)
            self.assertEqual(rs.last_insert_rowid, i)

        rs = self.client.execute("SELECT id, v, typeof(v) FROM v ORDER BY id")
        self.assertEqual(len(rs.rows), len(cases))
        for i, (sent, expected, kind) in enumerate(cases):
            with self.subTest(case=i, sent=repr(sent)[:40]):
                row_id, value, typeof = rs.rows[i]
                self.assertEqual(row_id, i)
                self.assertEqual(typeof, kind)
                self.assertEqual(type(value), type(expected))
                self.assertEqual(value, expected)

    def test_positional_and_named_arguments(self) -> None:
        rs = self.client.execute("SELECT ? AS a, ?2 AS b, ?1 AS again", [1, "two"])
        self.assertEqual(rs.rows[0].astuple(), (1, "two", 1))
        rs = self.client.execute(
            "SELECT :a AS a, @b AS b, $c AS c", {"a": "A", "b": 2.5, "c": None}
        )
        self.assertEqual(rs.rows[0].asdict(), {"a": "A", "b": 2.5, "c": None})
        rs = self.client.execute(("SELECT :x + :x AS twice", {"x": 21}))
        self.assertEqual(rs.rows[0]["twice"], 42)

    # --- batch ----------------------------------------------------------------------

    def test_batch_runs_in_one_transaction(self) -> None:
        results = self.client.batch(
            [
                "CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT)",
                ("INSERT INTO t (x) VALUES (?)", ["one"]),
                ("INSERT INTO t (x) VALUES (:x)", {"x": "two"}),
                "SELECT x FROM t ORDER BY id",
            ]
        )
        self.assertEqual(len(results), 4)
        self.assertEqual([r.rows_affected for r in results], [0, 1, 1, 0])
        self.assertEqual(results[2].last_insert_rowid, 2)
        self.assertEqual([row[0] for row in results[3].rows], ["one", "two"])
        self.assertEqual(self.count("t"), 2)

    def test_failing_batch_rolls_back_everything(self) -> None:
        self.client.execute("CREATE TABLE t (x UNIQUE)")
        self.client.execute("INSERT INTO t VALUES ('before')")
        err = self.assertLibsqlError(
            lambda: self.client.batch(
                [
                    "INSERT INTO t VALUES ('one')",
                    "CREATE TABLE side (y)",
                    "INSERT INTO t VALUES ('one')",
                    "INSERT INTO t VALUES ('never')",
                ]
            ),
            "SQLITE_CONSTRAINT",
        )
        self.assertIn("UNIQUE constraint failed: t.x", err.explanation)
        rs = self.client.execute("SELECT x FROM t")
        self.assertEqual([row[0] for row in rs.rows], ["before"])
        rs = self.client.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'side'")
        self.assertEqual(rs.rows[0][0], 0)
        # Nothing is left open: later writes land.
        self.client.execute("INSERT INTO t VALUES ('after')")
        self.assertEqual(self.count("t"), 2)

    # --- errors ---------------------------------------------------------------------

    def test_constraint_error_code(self) -> None:
        self.client.execute("CREATE TABLE t (x UNIQUE, y NOT NULL DEFAULT 0)")
        self.client.execute("INSERT INTO t (x) VALUES (1)")
        err = self.assertLibsqlError(
            lambda: self.client.execute("INSERT INTO t (x) VALUES (1)"), "SQLITE_CONSTRAINT"
        )
        self.assertIn("UNIQUE constraint failed: t.x", err.explanation)
        self.assertTrue(str(err).startswith("SQLITE_CONSTRAINT: "), str(err))

        err = self.assertLibsqlError(
            lambda: self.client.execute("INSERT INTO t (x, y) VALUES (2, NULL)"),
            "SQLITE_CONSTRAINT",
        )
        self.assertIn("NOT NULL constraint failed: t.y", err.explanation)
        self.assertEqual(self.count("t"), 1)

    def test_sql_error_codes(self) -> None:
        err = self.assertLibsqlError(
            lambda: self.client.execute("SELECT nope FROM sqlite_schema"), "SQL_INPUT_ERROR"
        )
        self.assertIn("no such column: nope", err.explanation)
        err = self.assertLibsqlError(
            lambda: self.client.execute("SELECT * FROM nowhere"), "SQL_INPUT_ERROR"
        )
        self.assertIn("no such table: nowhere", err.explanation)
        self.assertLibsqlError(
            lambda: self.client.execute("SELECT 1; SELECT 2"), "SQL_MANY_STATEMENTS"
        )

    # --- tokens ---------------------------------------------------------------------

    def test_read_only_token_cannot_write(self) -> None:
        self.client.execute("CREATE TABLE t (x)")
        self.client.execute("INSERT INTO t VALUES ('seed')")
        ro = self.connect(db_token(self.name, "read-only"))

        self.assertEqual(ro.execute("SELECT x FROM t").rows[0][0], "seed")
        self.assertEqual(ro.batch(["SELECT count(*) FROM t"])[0].rows[0][0], 1)

        # The server answers 403 with sqld's {"error": ...} body (no "message" key), which
        # this client reports as SERVER_ERROR with the status.
        for write in (
            lambda: ro.execute("INSERT INTO t VALUES ('no')"),
            lambda: ro.execute("DROP TABLE t"),
            lambda: ro.batch(["INSERT INTO t VALUES ('no')"]),
        ):
            err = self.assertLibsqlError(write, "SERVER_ERROR")
            self.assertIn("HTTP status 403", err.explanation)
        self.assertEqual(self.count("t"), 1)

    def test_block_writes_is_reported_as_blocked(self) -> None:
        self.client.execute("CREATE TABLE t (x)")
        api("PATCH", f"/databases/{self.name}/configuration", {"block_writes": True})
        self.assertLibsqlError(lambda: self.client.execute("INSERT INTO t VALUES (1)"), "BLOCKED")
        self.assertLibsqlError(lambda: self.client.batch(["INSERT INTO t VALUES (1)"]), "BLOCKED")
        self.assertEqual(self.count("t"), 0)
        api("PATCH", f"/databases/{self.name}/configuration", {"block_writes": False})
        self.client.execute("INSERT INTO t VALUES (1)")
        self.assertEqual(self.count("t"), 1)

    def test_missing_or_foreign_token_is_refused(self) -> None:
        other, _ = new_database(self)
        for token in (None, "not-a-jwt", db_token(other)):
            with self.subTest(token=token):
                client = self.connect(token)
                err = self.assertLibsqlError(lambda: client.execute("SELECT 1"), "SERVER_ERROR")
                self.assertIn("HTTP status 401", err.explanation)


if __name__ == "__main__":
    unittest.main()
