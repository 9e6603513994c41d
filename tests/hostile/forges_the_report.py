"""Forges the report after the grade: a double fork in a new session, at import, leaves a
grandchild that waits for the grade to end and then overwrites the report (TARGET) with a
perfect score. The test fills in TARGET and TOKEN."""

import os
import sys
import time

from kv_cache_base import *  # noqa: F401,F403 - correct, so the grade runs to its end

TARGET, TOKEN = "@TARGET@", "@TOKEN@"
FORGER = f"""
import time
time.sleep(4)
with open({TARGET!r}, "w") as f:
    f.write('{{"level": "L6", "score": 100}}')
"""

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", FORGER, TOKEN])
    os._exit(0)
time.sleep(0.2)
