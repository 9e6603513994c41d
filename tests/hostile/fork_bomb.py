"""A fork bomb in `attend`: processes that fork without end, each carrying TOKEN (filled in by
the test) on its command line, so that the test can look for survivors."""

import subprocess
import sys
import time

from kv_cache_base import *  # noqa: F401,F403

TOKEN = "@TOKEN@"
BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


def attend(cache, query):
    subprocess.Popen([sys.executable, "-c", BOMB, TOKEN])
    time.sleep(3600)
