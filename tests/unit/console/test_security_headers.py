"""The console's response headers on the app `create_app` builds: the content security policy and its companions
on pages and error pages, nosniff everywhere, and HSTS and Secure cookies only for requests that came over
https, directly or through a trusted proxy."""

from __future__ import annotations

import pytest

from console.security import TrustedProxies, forwarded_proto, secure_cookie

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "media-src 'self' data: blob:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HSTS = "max-age=31536000; includeSubDomains"


def _page_headers(response) -> None:
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    assert response.headers["x-frame-options"] == "DENY"


def test_every_console_page_and_error_page_carries_the_policy(console, tenant_key, admin_key, sign_in):
    tenant = console()
    _page_headers(tenant.get("/console/signin"))
    assert sign_in(tenant, tenant_key).status_code == 303
    playground = tenant.get("/console/playground")
    assert playground.status_code == 200
    _page_headers(playground)
    missing = tenant.get("/console/requests/no-such-request")
    assert missing.status_code == 404
    assert "Something went wrong (404)" in missing.text
    _page_headers(missing)
    toast = tenant.get("/console/requests?mix=colour", headers={"hx-request": "true"})
    assert toast.status_code == 400
    assert toast.headers["hx-retarget"] == "#toast"
    _page_headers(toast)
    _page_headers(tenant.get("/static/console.js"))
    _page_headers(tenant.get("/no-such-page"))

    admin = console()
    assert sign_in(admin, admin_key, "/console/admin/signin").status_code == 303
    tenants = admin.get("/console/admin/tenants")
    assert tenants.status_code == 200
    _page_headers(tenants)


def test_the_api_gets_nosniff_but_no_page_policy(console):
    client = console()
    refused = client.get("/v1/models")
    assert refused.status_code == 401
    assert refused.headers["x-content-type-options"] == "nosniff"
    for name in ("content-security-policy", "x-frame-options", "referrer-policy", "strict-transport-security"):
        assert name not in refused.headers
    assert "content-security-policy" not in client.get("/admin/tenants").headers


def _cookies(response) -> dict[str, str]:
    return {value.split("=", 1)[0]: value for value in response.headers.get_list("set-cookie")}


HTTP, HTTPS, LAN = "http://console.test", "https://console.test", ["10.0.0.0/8"]
# name: (base URL, peer address, X-Forwarded-Proto, trusted proxies, forced Secure cookies) -> (HSTS, Secure)
TRANSPORTS = {
    "plain-http": ((HTTP, None, None, [], False), (False, False)),
    "https": ((HTTPS, None, None, [], False), (True, True)),
    "trusted-proxy-says-https": ((HTTP, "10.1.2.3", "https", LAN, False), (True, True)),
    "untrusted-peer-says-https": ((HTTP, "203.0.113.9", "https", LAN, False), (False, False)),
    "loopback-not-configured": ((HTTP, "127.0.0.1", "https", [], False), (False, False)),
    "trusted-proxy-says-http": ((HTTP, "10.1.2.3", "http", LAN, False), (False, False)),
    "nearest-hop-was-http": ((HTTP, "10.1.2.3", "https, http", LAN, False), (False, False)),
    "forced-secure-cookies": ((HTTP, "203.0.113.9", "https", [], True), (False, True)),
}


@pytest.mark.parametrize(("arrival", "expected"), list(TRANSPORTS.values()), ids=list(TRANSPORTS))
def test_hsts_and_secure_cookies_follow_the_transport(console, tenant_key, sign_in, arrival, expected):
    base_url, peer, proto, proxies, forced = arrival
    headers = {"x-forwarded-proto": proto} if proto else {}
    client = console(peer=peer, base_url=base_url, trusted_proxies=proxies, console_secure_cookies=forced)
    hsts, secure = expected
    page = client.get("/console/signin", headers=headers)
    assert page.status_code == 200
    assert (page.headers.get("strict-transport-security") == HSTS) is hsts
    assert ("strict-transport-security" in page.headers) is hsts
    csrf = _cookies(page)["csrftoken"]
    assert ("; Secure" in csrf) is secure

    signed = sign_in(client, tenant_key, **headers)
    assert signed.status_code == 303
    session = _cookies(signed)["tessera_session"]
    assert ("; Secure" in session) is secure
    assert "HttpOnly" in session
    assert "SameSite=lax" in session


@pytest.mark.parametrize(
    ("entries", "host", "trusted"),
    [
        ([], "127.0.0.1", False),
        (["10.0.0.0/8"], "10.200.0.1", True),
        (["10.0.0.0/8"], "11.0.0.1", False),
        (["192.0.2.7"], "192.0.2.7", True),
        (["2001:db8::/32"], "2001:db8::1", True),
        (["10.0.0.0/8"], "testclient", False),
        (["10.0.0.0/8"], None, False),
    ],
)
def test_trusted_proxies_are_addresses_and_networks(entries, host, trusted):
    assert TrustedProxies.parse(entries).trusts(host) is trusted


def test_a_misconfigured_proxy_list_is_refused_at_start_up():
    with pytest.raises(ValueError, match=r"'proxy\.internal' is not an IP address or CIDR"):
        TrustedProxies.parse(["proxy.internal"])


@pytest.mark.parametrize(
    ("raw", "proto"),
    [([], None), ([b"https"], "https"), ([b"HTTPS "], "https"), ([b"https, http"], "http"), ([b"http", b"x"], "x")],
)
def test_the_nearest_hops_forwarded_proto_counts(raw, proto):
    scope = {"headers": [(b"x-forwarded-proto", value) for value in raw]}
    assert forwarded_proto(scope) == proto  # type: ignore[arg-type]


def test_secure_is_added_once():
    assert secure_cookie("a=b; Path=/") == "a=b; Path=/; Secure"
    assert secure_cookie("a=b; Path=/; Secure") == "a=b; Path=/; Secure"
    assert secure_cookie("a=secure; Path=/") == "a=secure; Path=/; Secure"
