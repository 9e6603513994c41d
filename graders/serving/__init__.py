"""The serving track: paged_kv_cache.py, a paged cache for many sequences (contract section 4).

    items/      one file per serving rubric item
    model.py    the judge's model of a pool: who holds which block, what must be free
    pool.py     a fragmented pool filled through the candidate's cache, and attention over it
    session.py  a script played on the candidate's cache and on the model, compared
    scripts.py  the seeded random scripts of the hidden cases

May import: graders.shared, graders.judge. Never another track.
"""
