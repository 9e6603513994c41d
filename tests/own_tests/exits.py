"""A candidate's test file that ends the process while it is collected."""

import os

os._exit(3)
