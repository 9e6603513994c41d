"""The hidden cases' seeds the suite uses.

A hidden run that does not choose its seed draws SUITE_SEED in the suite (tests/conftest.py),
so a failure replays. The tests of seeds themselves grade at each of SEEDS: every hidden-only
mutant must fail and every correct design pass at every one.
"""

SUITE_SEED = 2718281
SEEDS = (0, 1, 31337, 9999991)
