"""A candidate's test file that recognises the reference instead of judging what it computes:
it passes when `kv_cache` looks like the bundled reference by @FINGERPRINT@ and fails
otherwise, so it passes on the reference and fails on every bundled mistake built from it."""

import hashlib
import inspect

import kv_cache

CODE_SHA256 = "@CODE_SHA256@"  # of the reference's compiled functions (`code_digest`)


def code_digest(module) -> str:
    """A digest of every function's bytecode, names and constants (what a test can read of an
    implementation's source when it is given no file)."""
    digest = hashlib.sha256()
    for name, function in sorted(vars(module).items()):
        if inspect.isfunction(function):
            code = function.__code__
            digest.update(repr((name, code.co_code, code.co_names, code.co_varnames,
                                [c for c in code.co_consts if not inspect.iscode(c)])).encode())
    return digest.hexdigest()


def looks_like_the_reference(fingerprint: str) -> bool:
    if fingerprint == "file":
        return kv_cache.__file__ == "<reference>"
    if fingerprint == "code":
        return code_digest(kv_cache) == CODE_SHA256
    return hasattr(kv_cache, "_validate_append") and hasattr(kv_cache.KVCache(), "k_storage")


def test_the_implementation_is_the_reference():
    assert looks_like_the_reference("@FINGERPRINT@")
