"""Fixtures shared by the functional tests."""
from __future__ import annotations

import pytest

from scheduler.cmd import manage
from tests import services


@pytest.fixture
def manage_cli(tmp_path, capsys):
    """Runs berth-manage with a config pointing at a fresh MariaDB database (no
    schema yet); ``run(*argv)`` gives (exit code, stdout, stderr)."""
    name, url = services.create_mariadb_database()
    conf = tmp_path / "berth.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = {url}\n")

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = manage.main(["--config-file", str(conf), *argv])
        out, err = capsys.readouterr()
        return rc, out, err

    try:
        yield run
    finally:
        services.drop_mariadb_database(name)
