"""slidewin.client_ip: the peer, or X-Forwarded-For read right to left past trusted proxies.

Each case runs on an ASGI scope and on the WSGI environ of the same request.
"""

import ipaddress

import pytest

import slidewin
from slidewin import client_ip

PROXIES = ("10.0.0.0/8", "192.168.1.7", "fd00::/8")


def scope(peer, xff=None, extra=()):
    headers = [(b"host", b"example.org")]
    if xff is not None:
        values = xff if isinstance(xff, list) else [xff]
        headers += [(b"x-forwarded-for", v.encode("latin-1")) for v in values]
    headers += list(extra)
    return {"type": "http", "client": (peer, 51000) if peer is not None else None,
            "headers": headers}


def environ(peer, xff=None):
    env = {"wsgi.version": (1, 0), "REQUEST_METHOD": "GET", "PATH_INFO": "/"}
    if peer is not None:
        env["REMOTE_ADDR"] = peer
    if xff is not None:
        env["HTTP_X_FORWARDED_FOR"] = ", ".join(xff) if isinstance(xff, list) else xff
    return env


def both(peer, xff=None, trusted=PROXIES):
    a = client_ip(scope(peer, xff), trusted_proxies=trusted)
    w = client_ip(environ(peer, xff), trusted_proxies=trusted)
    assert a == w, (a, w)
    return a


CASES = [
    # (peer, X-Forwarded-For, expected)
    ("203.0.113.9", None, "203.0.113.9"),                       # direct, no header
    ("203.0.113.9", "1.2.3.4", "203.0.113.9"),                  # untrusted peer: header ignored
    ("10.1.2.3", None, "10.1.2.3"),                             # trusted peer, no header
    ("10.1.2.3", "198.51.100.5", "198.51.100.5"),               # one proxy
    ("10.1.2.3", "6.6.6.6, 198.51.100.5", "198.51.100.5"),      # forged leftmost: not used
    ("10.1.2.3", "6.6.6.6, 198.51.100.5, 10.9.9.9", "198.51.100.5"),   # two proxies
    ("10.1.2.3", "6.6.6.6,198.51.100.5,192.168.1.7", "198.51.100.5"),  # no spaces
    ("10.1.2.3", "10.0.0.1, 10.0.0.2", "10.0.0.1"),            # every hop trusted: leftmost
    ("10.1.2.3", "198.51.100.5:4711", "198.51.100.5"),          # a port is dropped
    ("10.1.2.3", "[2001:db8::1]:443", "2001:db8::1"),
    ("10.1.2.3", "2001:db8::1", "2001:db8::1"),
    ("10.1.2.3", "2001:DB8:0:0::1", "2001:db8::1"),             # normalised
    ("10.1.2.3", "1.1.1.1, unknown", "10.1.2.3"),               # garbage: the last trusted hop
    ("10.1.2.3", "1.1.1.1, unknown, 10.5.5.5", "10.5.5.5"),
    ("10.1.2.3", "1.1.1.1, , 198.51.100.5, ", "198.51.100.5"),  # empty elements skipped
    ("10.1.2.3", "", "10.1.2.3"),                               # empty header
    ("10.1.2.3", " ,  ,", "10.1.2.3"),
    ("10.1.2.3", "[::1", "10.1.2.3"),                           # malformed bracket
    ("10.1.2.3", "300.1.1.1", "10.1.2.3"),
    ("fd00::5", "198.51.100.5", "198.51.100.5"),                # IPv6 proxy
    ("::1", "198.51.100.5", "::1"),                              # ::1 not trusted here
    ("not-an-ip", "198.51.100.5", "not-an-ip"),                 # odd peer: itself, untrusted
]


@pytest.mark.parametrize("peer,xff,expected", CASES)
def test_client_ip(peer, xff, expected):
    assert both(peer, xff) == expected


def test_no_trusted_proxies_is_the_peer():
    assert both("10.1.2.3", "1.2.3.4", trusted=()) == "10.1.2.3"
    assert client_ip(scope("10.1.2.3", "1.2.3.4")) == "10.1.2.3"
    assert client_ip(environ("10.1.2.3", "1.2.3.4")) == "10.1.2.3"


def test_several_header_lines_are_one_list():
    s = scope("10.1.2.3", ["6.6.6.6, 198.51.100.5", "10.2.2.2"])
    assert client_ip(s, trusted_proxies=PROXIES) == "198.51.100.5"
    s = scope("10.1.2.3", ["198.51.100.5", "7.7.7.7"])
    assert client_ip(s, trusted_proxies=PROXIES) == "7.7.7.7"


def test_underscore_header_name_is_not_x_forwarded_for():
    s = scope("10.1.2.3", extra=[(b"x_forwarded_for", b"1.2.3.4")])
    assert client_ip(s, trusted_proxies=PROXIES) == "10.1.2.3"


def test_unknown_peer():
    assert client_ip(scope(None, "1.2.3.4"), trusted_proxies=PROXIES) == ""
    assert client_ip(environ(None, "1.2.3.4"), trusted_proxies=PROXIES) == ""
    # a Unix socket peer (nginx -> uvicorn --uds) trusted by "unix"
    assert client_ip(scope(None, "6.6.6.6, 1.2.3.4"), trusted_proxies=("unix",)) == "1.2.3.4"


def test_trusted_proxies_forms():
    s = scope("10.1.2.3", "6.6.6.6, 198.51.100.5")
    assert client_ip(s, trusted_proxies="10.0.0.0/8") == "198.51.100.5"
    assert client_ip(s, trusted_proxies=["10.0.0.0/8"]) == "198.51.100.5"
    assert client_ip(s, trusted_proxies={"10.1.2.3"}) == "198.51.100.5"
    assert client_ip(s, trusted_proxies=ipaddress.ip_network("10.0.0.0/8")) == "198.51.100.5"
    assert client_ip(s, trusted_proxies=[ipaddress.ip_address("10.1.2.3")]) == "198.51.100.5"
    assert client_ip(s, trusted_proxies=(x for x in ["10.1.2.3"])) == "198.51.100.5"
    # a host address with host bits in a network form is accepted (strict=False)
    assert client_ip(s, trusted_proxies="10.1.2.3/8") == "198.51.100.5"
    # everything trusted, spelled out: the leftmost is what the proxies vouch for
    assert client_ip(s, trusted_proxies=("0.0.0.0/0",)) == "6.6.6.6"


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "not an ip", "", "*", ["10.0.0.0/8", "x"],
                                 ("1.2.3.4.5",)])
def test_bad_trusted_proxies_value(bad):
    with pytest.raises(ValueError, match="trusted_proxies"):
        client_ip(scope("10.1.2.3", "1.2.3.4"), trusted_proxies=bad)


@pytest.mark.parametrize("bad", [5, [5], [None], [b"10.0.0.1"], [["10.0.0.0/8"]]])
def test_bad_trusted_proxies_type(bad):
    with pytest.raises(TypeError, match="trusted_proxies"):
        client_ip(scope("10.1.2.3", "1.2.3.4"), trusted_proxies=bad)


def test_bad_trusted_proxies_without_a_header_still_raises():
    with pytest.raises(ValueError, match="trusted_proxies"):
        client_ip(scope("203.0.113.9"), trusted_proxies=["nope"])


def test_not_a_scope_or_environ():
    with pytest.raises(TypeError, match="scope"):
        client_ip({"foo": 1})


def test_exported():
    assert "client_ip" in slidewin.__all__
    assert slidewin.client_ip is client_ip


def test_ipv4_mapped_ipv6_is_the_ipv4_client():
    """A dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d: the same client, and a
    trusted IPv4 proxy network matches it."""
    scope = {"type": "http", "client": ("::ffff:10.0.0.2", 5000),
             "headers": [(b"x-forwarded-for", b"203.0.113.9, ::ffff:10.0.0.7")]}
    assert client_ip(scope, trusted_proxies="10.0.0.0/8") == "203.0.113.9"
    assert client_ip({"type": "http", "client": ("::ffff:1.2.3.4", 1), "headers": []}) == "1.2.3.4"
    environ = {"REMOTE_ADDR": "::ffff:10.0.0.2", "HTTP_X_FORWARDED_FOR": "::ffff:1.2.3.4"}
    assert client_ip(environ, trusted_proxies=("10.0.0.0/8",)) == "1.2.3.4"


# ---- RFC 7239 Forwarded (header="forwarded") -----------------------------------------------------


def fwd_both(peer, value, trusted=PROXIES):
    """client_ip with header="forwarded" on a scope and an environ of the same request."""
    s = {"type": "http", "client": (peer, 1) if peer else None,
         "headers": [(b"forwarded", v.encode("latin-1"))
                     for v in (value if isinstance(value, list) else [value])]}
    e = {"wsgi.version": (1, 0), "REMOTE_ADDR": peer or "",
         "HTTP_FORWARDED": ", ".join(value) if isinstance(value, list) else value}
    a = client_ip(s, trusted_proxies=trusted, header="forwarded")
    w = client_ip(e, trusted_proxies=trusted, header="forwarded")
    assert a == w, (a, w)
    return a


FORWARDED = [
    ("203.0.113.9", "for=1.2.3.4", "203.0.113.9"),                       # untrusted peer
    ("10.1.2.3", "for=198.51.100.5", "198.51.100.5"),
    ("10.1.2.3", "for=198.51.100.5;proto=https;by=10.1.2.3", "198.51.100.5"),
    ("10.1.2.3", "For=198.51.100.5", "198.51.100.5"),                     # names: any case
    ("10.1.2.3", 'for="198.51.100.5:4711"', "198.51.100.5"),               # quoted, a port
    ("10.1.2.3", 'for="[2001:db8:cafe::17]:4711"', "2001:db8:cafe::17"),
    ("10.1.2.3", 'for="[2001:db8:cafe::17]"', "2001:db8:cafe::17"),
    ("10.1.2.3", "for=6.6.6.6, for=198.51.100.5", "198.51.100.5"),         # forged leftmost
    ("10.1.2.3", "for=6.6.6.6, for=198.51.100.5, for=10.9.9.9", "198.51.100.5"),
    ("10.1.2.3", "for=6.6.6.6,for=198.51.100.5", "198.51.100.5"),
    ("10.1.2.3", ["for=6.6.6.6", "for=198.51.100.5"], "198.51.100.5"),      # several lines
    ("10.1.2.3", "for=10.0.0.1, for=10.0.0.2", "10.0.0.1"),                # all trusted
    ("10.1.2.3", "for=1.1.1.1, for=unknown", "10.1.2.3"),                  # unknown: ends
    ("10.1.2.3", "for=1.1.1.1, for=_hidden, for=10.5.5.5", "10.5.5.5"),     # obfuscated
    ("10.1.2.3", "for=1.1.1.1, proto=https", "10.1.2.3"),                  # no for=: ends
    ("10.1.2.3", 'for="1.1.1.1, for=2.2.2.2"', "10.1.2.3"),                # a comma quoted
    ("10.1.2.3", 'for="198.51.100.5', "10.1.2.3"),                         # unbalanced quote
    ("10.1.2.3", "for=1.1.1.1;for=2.2.2.2", "10.1.2.3"),                   # for= twice
    ("10.1.2.3", "for=1.1.1.1, , for=198.51.100.5, ", "198.51.100.5"),      # empty elements
    ("10.1.2.3", 'for=1.1.1.1;x="a;b,c", for=198.51.100.7', "198.51.100.7"),
    ("10.1.2.3", "", "10.1.2.3"),
]


@pytest.mark.parametrize("peer,value,expected", FORWARDED)
def test_forwarded(peer, value, expected):
    assert fwd_both(peer, value) == expected


def test_forwarded_header_is_read_only_when_asked():
    """A proxy writes one of the two headers; the other arrives as the client wrote it. So
    the default (X-Forwarded-For) never reads Forwarded, and header="forwarded" never reads
    X-Forwarded-For: a forged header of the other kind changes nothing."""
    s = scope("10.1.2.3", "198.51.100.5", extra=[(b"forwarded", b"for=6.6.6.6")])
    assert client_ip(s, trusted_proxies=PROXIES) == "198.51.100.5"
    s = scope("10.1.2.3", "6.6.6.6", extra=[(b"forwarded", b"for=198.51.100.5")])
    assert client_ip(s, trusted_proxies=PROXIES, header="forwarded") == "198.51.100.5"
    assert client_ip(scope("10.1.2.3", "6.6.6.6"), trusted_proxies=PROXIES,
                     header="forwarded") == "10.1.2.3"
    # behind a Unix socket proxy
    assert fwd_both(None, "for=6.6.6.6, for=198.51.100.5", trusted=("unix",)) == "198.51.100.5"


def test_other_header_names():
    s = scope("10.1.2.3", extra=[(b"x-real-ip", b"198.51.100.5")])
    assert client_ip(s, trusted_proxies=PROXIES, header="X-Real-IP") == "198.51.100.5"
    e = {"REMOTE_ADDR": "10.1.2.3", "HTTP_X_REAL_IP": "198.51.100.5"}
    assert client_ip(e, trusted_proxies=PROXIES, header="x-real-ip") == "198.51.100.5"


@pytest.mark.parametrize("bad,exc", [("x_real_ip", ValueError), ("", ValueError),
                                     ("a b", ValueError), (b"forwarded", TypeError),
                                     (None, TypeError)])
def test_bad_header(bad, exc):
    with pytest.raises(exc, match="header"):
        client_ip(scope("10.1.2.3", "1.2.3.4"), trusted_proxies=PROXIES, header=bad)
