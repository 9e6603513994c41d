"""The worker side: everything that runs beside a candidate's code, and nothing else.

This folder is all of the kata that a sandboxed worker can see (`graders.judge.isolation` binds it in
alone). It imports nothing from the judge's side of `graders`:

    serve.py          the worker process: a zygote that forks a child per request, and the spawner
    wire.py           the frames and tensor encoding that judge and worker speak
    ops.py            the plan executor: calls the candidate's functions, and the probes it uses
    beam_search.py    the worker half of `beam-reorder`: a cached beam search
    layer.py          the layer a plan builds for the candidate's `decode_step`
    batching.py       the driver of the batching track: the candidate's scheduler, step by step
    pytest_runner.py  runs a candidate's own tests against one implementation
    limits.py         resource limits and the import guard, applied before the candidate's file
"""
