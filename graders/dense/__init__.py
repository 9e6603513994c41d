"""The dense track: the question itself (kv_cache.py, levels L4-L6, the tells, own tests).

    items/          one file per dense rubric item: its check, public cases and hidden cases
    decode_loop.py  a sequence decoded through a cache in chunks, and the float64 answers
    decoder.py      the judge's small decoder for beam-reorder (float64, uncached)
    bad_calls.py    calls the contract says must raise, and what "raised" must leave unchanged
    mistakes.py     the likely mistakes the candidate's own tests must catch (own-tests)
    disguise.py     the reference disguised, so own tests cannot recognise it (own-tests)

May import: graders.shared, graders.judge (the Candidate items are given, the workers
own-tests runs on), graders.worker (trusted worker-side code the judge also runs). Never another
track.
"""
