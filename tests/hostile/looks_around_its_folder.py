"""At import: lists the folder its file lies in, tries to append to its own file and to plant
a file beside it, then raises with what it saw and what it wrote."""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
seen = sorted(os.listdir(HERE))
wrote = []
for name in (os.path.basename(__file__), "planted.py"):
    try:
        with open(os.path.join(HERE, name), "a") as f:
            f.write("# planted by a candidate\n")
        wrote.append(name)
    except OSError:
        pass
raise ImportError(f"saw {seen}, wrote {wrote}")
