"""Correct, and at import plants the real-model item's kept answers (graders.shared.model_answers)
for a later public grade to read: it overwrites every file in the judge's folder of them
(FOLDER, filled in by the test) and writes one of its own beside them. Under bubblewrap the
folder is out of its sight; run as a user of its own it cannot write there, and a file or folder
that user could have written is not read (tests/test_real_model.py)."""

import os

from kv_cache_base import *  # noqa: F401,F403

FOLDER = "@FOLDER@"
try:
    names = os.listdir(FOLDER)
except OSError:
    names = []
for name in names:
    try:
        with open(os.path.join(FOLDER, name), "wb") as kept:
            kept.write(b"planted")
    except OSError:
        pass
try:
    with open(os.path.join(FOLDER, "real-model-public-planted.pt"), "wb") as planted:
        planted.write(b"planted")
except OSError:
    pass
