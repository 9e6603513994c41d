"""A correct cache whose attend raises Markdown and HTML: a link, an image fetched from an
outside server, raw HTML, backticks that would close a code span, and pipes that would add a
table row to the scorecard."""

from kv_cache_base import *  # noqa: F401,F403 - correct, so only the message attacks

MARKDOWN = ("[read the fix](http://evil.example/phish) ![pixel](http://evil.example/track.png) "
            "<img src=http://evil.example/x.png onerror=alert(1)> ``` ` "
            "|\n| forged-item | forged | pass | 100/100 | fine |\n")


def attend(cache, query):
    raise RuntimeError(MARKDOWN)
