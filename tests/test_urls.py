"""The one host normalisation shared by rendering and the store's domain lookups (a private helper, tested on purpose)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pydantic_ai_citations._urls import bare_host, host_key, key_host, url_host


@pytest.mark.parametrize(
    ('host', 'expected'),
    [
        ('WWW.Example.COM.', 'example.com'),
        (' docs.python.org ', 'docs.python.org'),
        ('www.', 'www'),
        ('wwwx.io', 'wwwx.io'),
    ],
)
def test_bare_host(host: str, expected: str) -> None:
    assert bare_host(host) == expected


@pytest.mark.parametrize(
    ('url', 'expected'),
    [
        ('https://www.GitHub.com/pydantic', 'github.com'),
        ('http://[::1]:8080/x', '::1'),
        ('http://[::1/unclosed', None),  # urlsplit raises ValueError: no host rather than a crash
        ('http://[not-an-ip]/', None),
        ('mailto:someone@example.com', None),
        ('', None),
        ('https://www./', 'www'),  # a host named `www` stays itself
    ],
)
def test_url_host(url: str, expected: str | None) -> None:
    assert url_host(url) == expected


@given(st.lists(st.text(st.characters(blacklist_characters='.'), min_size=1, max_size=8), min_size=1, max_size=5))
def test_key_host_reads_back_a_host_key(labels: list[str]) -> None:
    host = '.'.join(labels)
    assert key_host(host_key(host)) == host
    assert key_host('dev.pydantic.docs.') == 'docs.pydantic.dev'
