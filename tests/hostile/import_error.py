"""Imports a module that does not exist."""

import kv_cache_helpers_that_do_not_exist  # noqa: F401
