"""A candidate's test file that copies what the judge sends it into /tmp: the compiled code of
the reference it is run against, every function's, as marshal bytes, for the candidate's
implementation (borrows_from_its_tests.py) to run as its own. It also drops the source text
wherever it finds one on the stack (the request the worker decoded)."""

import inspect
import marshal

import kv_cache

DROP = "/tmp/@TOKEN@"


def test_copies_the_reference_into_tmp():
    if kv_cache.__file__ != "<reference>":  # the reference's file name is no secret
        return
    codes = {name: f.__code__ for name, f in vars(kv_cache).items() if inspect.isfunction(f)}
    with open(f"{DROP}.marshal", "wb") as out:
        marshal.dump(codes, out)
    for frame in inspect.stack():
        for value in frame.frame.f_locals.values():
            if isinstance(value, dict) and isinstance(value.get("source"), str):
                with open(f"{DROP}.py", "w") as out:
                    out.write(value["source"])
