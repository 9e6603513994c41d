"""A correct cache that attacks the HTML pages (kata grade --html, kata interview report --html):
its attend raises, and its source holds, markup that would run a script, fetch from an outside
server or restyle the page if any of it became live. Each script sets `window.kataPwned`, which
tests/test_html_browser.py reads from the page afterwards.

<script>window.kataPwned = "docstring script"</script>
"""

from kv_cache_base import *  # noqa: F401,F403 - correct, so only the message attacks

PAYLOADS = (
    '<script>window.kataPwned = "script"</script>',
    '</script><script>window.kataPwned = "closes the page\'s script"</script>',
    '</style><script>window.kataPwned = "closes the style"</script>',
    '</pre></span></div></td></tr></table><img src=x onerror="window.kataPwned=\'img\'">',
    '"><svg onload="window.kataPwned=\'attribute\'"></svg>',
    "' onmouseover='window.kataPwned=1' x='",
    '<a href="javascript:window.kataPwned=\'link\'" id="kata-link">click</a>',
    '<iframe srcdoc="<script>parent.kataPwned=\'iframe\'</script>"></iframe>',
    '<meta http-equiv="refresh" content="0;url=http://evil.example/">',
    '<base href="http://evil.example/">',
    '<link rel="stylesheet" href="http://evil.example/x.css">',
    '<style>body { display: none }</style>',
    '<img src="http://evil.example/pixel.png">',
    '<!-- an unclosed comment',
    '<![CDATA[ ]]> &lt;script&gt; &amp; &#60;b&#62;',
)


def attend(cache, query):
    raise RuntimeError(" ".join(PAYLOADS))  # <script>window.kataPwned = "comment"</script>
