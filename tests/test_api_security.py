"""The Prefect API is protected as scripts/env.sh sets it up (issue 45): an auth string made once
per checkout, owner-only and git-ignored; a real server started with those settings refuses
requests without it (401), refuses state changes without a CSRF token (403), answers no
cross-origin preflight but its UI's own origin's; the Prefect client and CLI work with it."""
from __future__ import annotations

import base64
import stat
import subprocess
import urllib.error
import urllib.request

import pytest

from tests.prefect_stack import API_PROTECTION, ROOT, Stack, api_protection

EVIL = "http://evil.example"


def request(url: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    """(status, headers) of one HTTP request, error statuses included."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.headers


def basic(auth_string: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(auth_string.encode()).decode()}


# --- scripts/env.sh ----------------------------------------------------------------------
def test_env_sh_makes_one_private_auth_string_per_checkout(tmp_path):
    first = api_protection(tmp_path / "a", 4321)
    assert set(first) == set(API_PROTECTION), first
    secret = tmp_path / "a" / ".prefect" / "auth-string"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert first["PREFECT_API_AUTH_STRING"] == first["PREFECT_SERVER_API_AUTH_STRING"] \
        == secret.read_text().strip()
    user, password = first["PREFECT_API_AUTH_STRING"].split(":")
    assert user == "pearl" and len(password) >= 40  # 32 random bytes, URL-safe base64
    assert api_protection(tmp_path / "a", 4321) == first, "made again on the second source"
    assert api_protection(tmp_path / "b", 4321)["PREFECT_API_AUTH_STRING"] != first["PREFECT_API_AUTH_STRING"]
    assert first["PREFECT_SERVER_CSRF_PROTECTION_ENABLED"] == "true"
    assert first["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"].split(",") == [
        "http://127.0.0.1:4321", "http://localhost:4321"]


def test_the_auth_string_stays_out_of_the_repository():
    out = subprocess.run(["git", "check-ignore", "-q", ".prefect/auth-string"], cwd=ROOT)
    assert out.returncode == 0, ".prefect/auth-string is not git-ignored"


# --- a real server -------------------------------------------------------------------------
real_server = pytest.mark.e2e  # the tests below start a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("security"), pools=())
    try:
        stack.start()
        yield stack
    finally:
        survivors = stack.stop()
        assert not survivors, f"processes left running: {survivors}"


@real_server
def test_a_cross_origin_preflight_gets_no_access(server):
    url = f"{server.api_url}/flow_runs/"
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    _, headers = request(url, "OPTIONS", {"Origin": EVIL, **preflight})
    assert headers.get("access-control-allow-origin") is None, dict(headers)
    # the UI's own origin (by either name) is allowed
    for origin in (server.ui_url, server.ui_url.replace("127.0.0.1", "localhost")):
        status, headers = request(url, "OPTIONS", {"Origin": origin, **preflight})
        assert status == 200 and headers.get("access-control-allow-origin") == origin, dict(headers)


@real_server
@pytest.mark.parametrize("method, path", [("GET", "/admin/version"), ("GET", "/csrf-token?client=x"),
                                          ("POST", "/flow_runs/filter"), ("POST", "/flow_runs/")])
def test_a_request_without_the_auth_string_is_refused(server, method, path):
    body = b"{}" if method == "POST" else None
    url = server.api_url + path
    # A read is refused for want of the auth string (401). A state change is refused first
    # for want of a CSRF token (403), which only /csrf-token gives, with the auth string.
    refused = {401} if method == "GET" else {401, 403}
    assert request(url, method, {"Content-Type": "application/json"}, body)[0] in refused
    wrong = basic("pearl:not-the-password")
    assert request(url, method, {"Content-Type": "application/json", **wrong}, body)[0] in refused
    fake_csrf = {"Prefect-Csrf-Token": "x", "Prefect-Csrf-Client": "x"}
    assert request(url, method, {"Content-Type": "application/json", **wrong, **fake_csrf}, body)[0] in refused


@real_server
def test_a_state_change_without_a_csrf_token_is_refused(server):
    status, _ = request(f"{server.api_url}/flows/", "POST",
                        {"Content-Type": "application/json", **basic(server.auth_string)}, b'{"name": "csrf"}')
    assert status == 403
    # reads need no token; the health check needs no auth string (services.sh polls it)
    assert request(f"{server.api_url}/admin/version", headers=basic(server.auth_string))[0] == 200
    assert request(f"{server.api_url}/health")[0] == 200


@real_server
def test_the_client_and_the_cli_work_with_the_auth_string(server):
    async def create_and_read(client):
        flow_id = await client.create_flow_from_name("pearl-security-check")  # a POST: CSRF token fetched
        return (await client.read_flow(flow_id)).name

    assert server.api(create_and_read) == "pearl-security-check"
    server.cli("work-pool", "create", "security-pool", "--type", "process")
    assert "security-pool" in server.cli("work-pool", "inspect", "security-pool").stdout
