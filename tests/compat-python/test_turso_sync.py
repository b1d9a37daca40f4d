"""Turso Sync with the Python client of the ``turso`` engine, pyturso (``turso.sync``),
unmodified: a local database that pulls the server's pages (``POST /pull-updates``) and
pushes its changes as SQL (``POST /v2/pipeline``); docs/DATA-PLANE.md, "Turso Sync".

Runs against a live ``atoll dev`` started by ``scripts/compat.sh`` (``ATOLL_URL``,
``ATOLL_TOKEN``), like test_libsql_client.py, whose helpers it uses.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest

import libsql_client
import turso.sync

from test_libsql_client import db_token, new_database


class TursoSync(unittest.TestCase):
    def local_path(self, name: str) -> str:
        directory = tempfile.mkdtemp(prefix="atoll-pyturso-")
        self.addCleanup(shutil.rmtree, directory, True)
        return os.path.join(directory, f"{name}.db")

    def test_bootstrap_pull_push_and_a_second_client(self) -> None:
        name, url = new_database(self)
        token = db_token(name)
        with libsql_client.create_client_sync(url, auth_token=token) as remote:
            remote.batch(
                [
                    "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
                    "INSERT INTO notes (body) VALUES ('one'), ('two')",
                ]
            )
            sync_url = url.rstrip("/")
            a = turso.sync.connect(self.local_path("a"), remote_url=sync_url, auth_token=token)
            self.addCleanup(a.close)
            rows = a.execute("SELECT body FROM notes ORDER BY id").fetchall()
            self.assertEqual([r[0] for r in rows], ["one", "two"])

            remote.execute("INSERT INTO notes (body) VALUES ('three')")
            self.assertTrue(a.pull())
            rows = a.execute("SELECT body FROM notes ORDER BY id").fetchall()
            self.assertEqual([r[0] for r in rows], ["one", "two", "three"])

            a.execute("INSERT INTO notes (id, body) VALUES (100, 'from python')")
            a.commit()
            a.push()
            rows = remote.execute("SELECT body FROM notes ORDER BY id").rows
            self.assertEqual([r[0] for r in rows], ["one", "two", "three", "from python"])

            b = turso.sync.connect(self.local_path("b"), remote_url=sync_url, auth_token=token)
            self.addCleanup(b.close)
            rows = b.execute("SELECT body FROM notes ORDER BY id").fetchall()
            self.assertEqual([r[0] for r in rows], ["one", "two", "three", "from python"])


if __name__ == "__main__":
    unittest.main()
