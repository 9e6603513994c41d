"""Reaches out at import: connects to a port on loopback (PORT), writes a file into $HOME and
into HOME_DIR (the judge's real home, filled in by the test), then raises with what worked."""

import os
import socket

PORT, HOME_DIR, TOKEN = int("@PORT@"), "@HOME@", "@TOKEN@"
worked = []
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
    worked.append("network")
except OSError:
    pass
for folder in (os.path.expanduser("~"), HOME_DIR):
    try:
        with open(os.path.join(folder, f"kata-hostile-{TOKEN}"), "w") as f:
            f.write("written by a candidate\n")
        worked.append(f"wrote {folder}")
    except OSError:
        pass
raise ImportError(f"reached: {worked}")
