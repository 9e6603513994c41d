"""Hidden release: two rows released at once, whose old keys would dominate any attention that
still reaches them, then new sequences started in those slots by multi-position appends.

The public item's old sequences are ordinary random data, so a released slot whose old
positions are merely down-weighted (a finite mask value added to the scores, -1e4 as in many
model codes) still passes: ordinary logits minus 1e4 weigh nothing. Here, seeded, 3 to 5 rows
decode a few chunks; the two rows to be released hold old keys a million times larger than
usual, pointing where their new sequences' queries will look (logits around 1e6 against
them), with large old values. Both rows are released; their lengths must be 0 while the other
rows keep theirs, and attend gives zeros for them. Then chunks appended to every row (no counts:
the released rows start new sequences, the others go on), fewer positions than the old
sequences held, so the stale slots stay inside the other rows' length. Every output is compared
with the float64 reference: the released rows over their new positions only.

(Stale slots here are large but finite. Non-finite stale data, say a sequence cancelled because
it went NaN, would poison even the reference, whose masked weights are exactly 0 but multiply
the stale values: 0 * NaN is NaN.)
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, first_divergence, require_shape
from graders.hidden import _cases

ITEM = "release"

SEED = _cases.BASE_SEED + 900
TOL = TOLERANCE[torch.float32]
STALE_KEY_SCALE = 1e6
STALE_VALUE_SCALE = 1e3


def grade(candidate: Candidate) -> str:
    g = cases.generator(SEED)
    B, H, D = _cases.randint(g, 3, 5), _cases.choice(g, (1, 2, 4)), _cases.choice(g, (8, 16))
    before = _cases.chunks(g, _cases.randint(g, 10, 20), 5)
    after = _cases.chunks(g, _cases.randint(g, 4, 8), 3)
    released = torch.randperm(B, generator=g)[:2].tolist()
    prefix = sum(before)  # positions of every row before the releases
    case = _cases.name(SEED, f"{_cases.shape(B, H, D)}, two rows released whose old keys "
                             "are huge, new sequences started by chunked appends")
    old = cases.sequence(g, B, H, H, prefix + sum(after), D)  # the rows not released go on
    new = cases.sequence(g, B, H, H, sum(after), D)  # used in the released rows only
    direction = cases.randn(g, B, H, 1, D)
    direction = direction / direction.norm(dim=-1, keepdim=True)
    new["q"] = new["q"] + 4.0 * direction  # q . direction is about 4 > 0: it looks at the old keys
    for b in released:
        old["k"][b, :, :prefix] = STALE_KEY_SCALE * direction[b]
        old["v"][b, :, :prefix] *= STALE_VALUE_SCALE

    def mixed(part: str, start: int, end: int) -> torch.Tensor:
        """Positions start..end-1 after the release: old rows go on, released rows are new."""
        x = old[part][:, :, prefix + start : prefix + end].clone()
        x[released] = new[part][released, :, start:end]
        return x

    plan = Plan()
    plan.new("c")
    total = 0
    for t in before:
        plan.append("c", old["k"][:, :, total : total + t], old["v"][:, :, total : total + t])
        total += t
    for b in released:
        plan.release("c", b)
    state = plan.state("c")
    right_after = plan.attend("c", old["q"][:, :, total - 1 : total])
    outputs, ends, total = [], [], 0
    for t in after:
        plan.append("c", mixed("k", total, total + t), mixed("v", total, total + t))
        total += t
        ends.append(total)
        outputs.append(plan.attend("c", mixed("q", total - 1, total)))
    results = _cases.run(candidate, plan, case)

    lengths = tensor(results[state]["lengths"], f"{case}: cache.lengths after the releases")
    want = [0 if b in released else prefix for b in range(B)]
    if lengths.tolist() != want:
        raise Fail(f"{case}: after releasing two rows, cache.lengths is not 0 for exactly those "
                   "rows with every other row's length kept")
    got = [tensor(results[right_after], f"{case}: attend right after the releases")]
    expected = [_cases.newest(old, prefix)]
    expected[0][released] = 0.0
    for index, end in zip(outputs, ends):
        got.append(tensor(results[index], f"{case}: attend's output"))
        expected.append(_cases.newest(old, prefix + end))
        expected[-1][released] = _cases.newest({p: new[p][released] for p in new}, end)
    for out in got:
        require_shape(out, (B, H, 1, D), f"{case}: attend's output")
    divergence = first_divergence(got, expected, TOL)
    if divergence is None:
        return (f"two rows released at once: lengths 0, zeros, then new sequences that never see "
                f"the old ones' huge keys, within {TOL}; other rows untouched")
    when = ("right after the releases" if divergence.step == 0 else
            f"at append {divergence.step} after them")
    row = divergence.row
    why = ("a released slot's new sequence must attend over its own new positions only: do the "
           "old sequence's keys still take part?" if row in released else
           "a row that was not released must go on as if nothing happened")
    raise Fail(f"{case}: {when}, row {row}, head {divergence.head} (max abs error "
               f"{divergence.max_abs:.2e}, tolerance {TOL}): {why}")
