"""Spellings of hosts webhooks must never reach, each with what it means to aiohttp, a browser or
inet_aton: tests/webhooks/test_addresses.py judges them, tests/webhooks/test_ssrf.py sends them."""

# ruff: noqa: RUF001, RUF003 -- the look-alike characters are the point of this table.

SPELLINGS = [
    # Unicode: yarl's IDNA (UTS #46) mapping turns these into ASCII digits and dots.
    ("１２７.０.０.１", "127.0.0.1 is a loopback"),
    ("127。0。0。1", "127.0.0.1 is a loopback"),
    ("127．0．0．1", "127.0.0.1 is a loopback"),
    ("127｡0｡0｡1", "127.0.0.1 is a loopback"),
    ("①②⑦.⓪.⓪.①", "127.0.0.1 is a loopback"),
    ("１０.０.０.１", "10.0.0.1 is a private"),
    ("１６９.２５４.１６９.２５４", "169.254.169.254 is a link-local"),
    ("ｌｏｃａｌｈｏｓｔ", "localhost is a loopback name"),
    # IDNA: `xn--` labels that decode to the same (`①②⑦`, `１２７`, and `１２７．０．０．１`).
    ("xn--orhcp.0.0.1", "127.0.0.1 is a loopback"),
    ("xn--8g7ccp.0.0.1", "127.0.0.1 is a loopback"),
    ("xn--5g7caagbcfc9b", "127.0.0.1 is a loopback"),
    # Trailing dots.
    ("127.0.0.1.", "127.0.0.1 is a loopback"),
    ("127.0.0.1..", "127.0.0.1 is a loopback"),
    ("localhost.", "localhost. is a loopback name"),
    # Percent-encoded.
    ("%31%32%37.0.0.1", "127.0.0.1 is a loopback"),
    ("%6c%6f%63%61%6c%68%6f%73%74", "is a loopback name"),
    # Numeric: decimal, hex, octal, short forms.
    ("2130706433", "127.0.0.1 is a loopback"),
    ("0x7f000001", "127.0.0.1 is a loopback"),
    ("017700000001", "127.0.0.1 is a loopback"),
    ("0177.0.0.1", "127.0.0.1 is a loopback"),
    ("127.1", "127.0.0.1 is a loopback"),
    ("0x7f.1", "127.0.0.1 is a loopback"),
    ("127.0.0.0x1", "127.0.0.1 is a loopback"),
    ("0", "0.0.0.0 is an unspecified"),
    ("167772161", "10.0.0.1 is a private"),
    # IPv6.
    ("[::1]", "::1 is a loopback"),
    ("[0:0:0:0:0:0:0:1]", "::1 is a loopback"),
    ("[::ffff:127.0.0.1]", "IPv6 form of 127.0.0.1"),
    ("[::ffff:7f00:1]", "IPv6 form of 127.0.0.1"),
    ("[fe80::1]", "fe80::1 is a link-local"),
    ("[fe80::1%25lo]", "is a link-local"),
    # Names reserved for loopback (RFC 6761 §6.3).
    ("localhost", "localhost is a loopback name"),
    ("LOCALHOST", "localhost is a loopback name"),
    ("hooks.localhost", "hooks.localhost is a loopback name"),
]
