"""`python -m graders.worker [--spawner FD]`: started by `graders.judge.workers`, never by hand."""

import sys

from graders.worker.serve import main, spawner

if sys.argv[1:2] == ["--spawner"]:
    spawner(int(sys.argv[2]))
else:
    main()
