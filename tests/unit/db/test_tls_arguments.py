"""MySQL URLs whose TLS arguments would not do what they say are refused up front
(the functional test_tls.py shows the failure on a real TLS server)."""
from __future__ import annotations

import pytest

from db.api import Database, check_tls_arguments
from db.errors import InvalidRequest

BASE = "mysql+pymysql://berth:secret-pw@db.example:3306/berth"


@pytest.mark.parametrize("query", [
    "ssl_ca=/etc/ca.pem&ssl_verify_cert=true",
    "ssl_verify_identity=true&ssl_ca=/etc/ca.pem",
    "ssl_cert=/c.pem&ssl_key=/k.pem&ssl_verify_cert=false",
    "ssl_check_hostname=false&ssl_verify_cert=true",
])
def test_verify_arguments_next_to_mapped_ones_are_refused(query):
    with pytest.raises(InvalidRequest) as caught:
        Database(f"{BASE}?{query}")
    assert caught.value.field == "database.connection"
    assert "secret-pw" not in str(caught.value) and "db.example" not in str(caught.value)


@pytest.mark.parametrize("query", [
    "", "ssl_ca=/etc/ca.pem", "ssl_ca=/etc/ca.pem&ssl_check_hostname=false",
    "ssl_ca=/etc/ca.pem&ssl_cert=/c.pem&ssl_key=/k.pem", "ssl_verify_cert=false",
    "ssl_verify_cert=true&ssl_verify_identity=true", "charset=utf8mb4",
])
def test_other_tls_arguments_pass(query):
    check_tls_arguments(f"{BASE}?{query}" if query else BASE)
    Database(f"{BASE}?{query}" if query else BASE).dispose()
