"""speculative-rollback: draft, verify, roll back; the cache equals plain decoding of what was kept.

Speculative decoding: a draft model proposes k tokens, the target model verifies them in one
call, each row accepts its own leading count, and the cache is rolled back past the rejected
ones before the next token. The loop here: each round, every row's k drafts are appended as a
chunk (keys and values projected and rotated by the judge at their absolute positions) and
verified with attend_chunk, compared query by query with a float64 forward over that row's
accepted tokens and drafts; `truncate` keeps each row's accepted drafts; then `decode_step`
takes the row's next true token (the verifier's correction) at `positions`, compared with a
float64 forward over the accepted tokens alone. The next round's chunk comes right after the
rollback, so a dropped key still attended shows there, and the cache (KVCache(capacity=16))
grows past its capacity as the rounds go, so do dropped keys copied with it.

Public: three rows, prompts of 3, 2 and 4 tokens through decode_step with counts, rounds of 4
drafts accepting [0, 4, 3] (a rollback by all 4, to the same length, by one), [2, 1, 4],
[1, 3, 0] (then row 1 rolled back to 0: it starts a new sequence), [4, 0, 2] (then every row
rolled back to 0) and [2, 2, 1] on the new sequences; and the loop on a KVCache(window=64),
larger than the run, for 4 rounds over two rows. Then `truncate` with a length of -1 and one past
a row's positions: ValueError, and keys, values, lengths and positions as before.

Hidden, seeded: shapes (B 2-4, MHA, GQA or MQA), k of 2-6 drafts, each draft right with
probability 1/2 (a row accepts its drafts up to the first wrong one), five rounds, one row rolled
back to 0, a KVCache(capacity) that the rounds outgrow; then truncate with lengths of the wrong
dtype (float) and the wrong shape ([B + 1]): ValueError, and nothing changed.
"""

from __future__ import annotations

import torch

from graders.dense.chunks import TOL, Check, lengths_of, require_checks
from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases, reference
from graders.shared.compare import first_divergence, require_shape
from graders.shared.plans import STATE_8, Fail, Plan, Raised, Results, tensor

ITEM = "speculative-rollback"

D_MODEL, HEAD_DIM, BASE, CAPACITY = 32, 8, 10000.0, 16
PROMPTS = [3, 2, 4]
DRAFTS = 4
ACCEPTED = [[0, 4, 3], [2, 1, 4], [1, 3, 0], [4, 0, 2], [2, 2, 1]]
RESTART = {2: [1], 3: [0, 1, 2]}  # after round r, these rows are rolled back to 0
# The same loop on a window larger than the run: truncate keeps a windowed cache's positions and
# lengths apart (it never wraps here: the sliding-window item is for that).
WINDOW = 64
WINDOWED_ACCEPTED = [[1, 4], [0, 2], [3, 0], [2, 3]]
HIDDEN_SEEDS = (4300, 4310)
HIDDEN_ROUNDS = 5


class Loop:
    """The draft-and-verify loop on `cache` (layer "L<cache>"), played into `plan`; the judge
    keeps each row's accepted tokens and answers every verification and decode step."""

    def __init__(
        self,
        plan: Plan,
        g: torch.Generator,
        batch: int,
        hq: int,
        hkv: int,
        capacity: int | None = None,
        window: int | None = None,
        cache: str = "c",
    ):
        self.plan, self.g, self.batch, self.hq, self.hkv = plan, g, batch, hq, hkv
        self.window, self.cache = window, cache
        self.weights = cases.layer_weights(g, D_MODEL, hq, hkv, HEAD_DIM)
        self.tokens: list[list[torch.Tensor]] = [[] for _ in range(batch)]  # accepted, [d_model]
        self.chunks: list[Check] = []
        # decode_step: its index, the answer [B, 1, d_model], its words, the rows that took a token
        self.steps: list[tuple[int, torch.Tensor, str, torch.Tensor]] = []
        plan.layer(f"L{cache}", self.weights, hq, hkv, HEAD_DIM, BASE)
        plan.new(cache, capacity=capacity, window=window)

    def token(self) -> torch.Tensor:
        return cases.randn(self.g, D_MODEL)

    def decode(self, counts: list[int], what: str) -> None:
        """decode_step with a new true token for the rows whose count is 1."""
        x = torch.stack([self.token() for _ in range(self.batch)])  # [B, d_model]
        index = self.plan.decode_step(
            f"L{self.cache}", self.cache, x[:, None], None if all(counts) else cases.counts(*counts)
        )
        want = torch.zeros(self.batch, 1, D_MODEL, dtype=torch.float64)
        for b in range(self.batch):
            if counts[b]:
                self.tokens[b].append(x[b])
                want[b, 0] = self._forward(self.tokens[b])["out"][0, -1]
        self.steps.append((index, want, what, torch.tensor(counts, dtype=torch.bool)))

    def round(self, drafts: list[list[torch.Tensor]], accepted: list[int], what: str) -> None:
        """Append each row's drafts as a chunk, verify them with attend_chunk, keep each row's
        `accepted` leading drafts with truncate, then decode the next true token."""
        t = len(drafts[0])
        k = torch.zeros(self.batch, self.hkv, t, HEAD_DIM)
        v, q = torch.zeros_like(k), torch.zeros(self.batch, self.hq, t, HEAD_DIM)
        want = torch.zeros(self.batch, self.hq, t, HEAD_DIM, dtype=torch.float64)
        kept = []
        for b in range(self.batch):
            n = len(self.tokens[b])
            full = self._forward(self.tokens[b] + drafts[b])  # [1, H, n + t, D] each
            k[b], v[b] = full["k"][0, :, n:].float(), full["v"][0, :, n:].float()
            q[b], want[b] = full["q"][0, :, n:].float(), full["attended"][0, :, n:]
            self.tokens[b] += drafts[b][: accepted[b]]
            kept.append(n + accepted[b])
        self.plan.append(self.cache, k, v)
        index = self.plan.attend_chunk(self.cache, q)
        self.chunks.append(Check(index, want, f"{what}: attend_chunk verifying the drafts"))
        self.plan.truncate(self.cache, cases.counts(*kept))
        self.decode([1] * self.batch, f"{what}: decode_step after truncate to {kept}")

    def drafts(self, t: int) -> list[list[torch.Tensor]]:
        """Each row's t drafts: new tokens; those a row accepts become its own (the verifier
        agreed with them), the rest are dropped."""
        return [[self.token() for _ in range(t)] for _ in range(self.batch)]

    def restart(self, rows: list[int]) -> None:
        """Roll `rows` back to 0: each starts a new sequence."""
        kept = [0 if b in rows else len(self.tokens[b]) for b in range(self.batch)]
        self.plan.truncate(self.cache, cases.counts(*kept))
        for b in rows:
            self.tokens[b] = []

    def _forward(self, tokens: list[torch.Tensor]) -> dict:
        return reference.attention_layer(
            torch.stack(tokens)[None], self.weights, self.hq, self.hkv, BASE, window=self.window
        )


def grade(candidate: Candidate) -> str:
    plan = Plan()
    loop = Loop(plan, cases.generator(430), len(PROMPTS), 4, 2, CAPACITY)
    for step in range(max(PROMPTS)):
        loop.decode([int(step < n) for n in PROMPTS], f"prompt step {step}")
    for r, accepted in enumerate(ACCEPTED):
        loop.round(loop.drafts(DRAFTS), accepted, f"round {r} (accepting {accepted})")
        if r in RESTART:
            loop.restart(RESTART[r])
    bad = _bad_truncates(plan, [len(row) for row in loop.tokens])
    windowed = Loop(plan, cases.generator(431), 2, 2, 2, window=WINDOW, cache="w")
    for r, accepted in enumerate(WINDOWED_ACCEPTED):
        windowed.round(windowed.drafts(DRAFTS), accepted, f"round {r} (accepting {accepted})")
    results = candidate.run(plan)
    _check_loop(results, loop, "the public loop")
    _check_refusals(results, bad)
    _check_loop(results, windowed, f"the loop on a KVCache(window={WINDOW})")
    return (
        f"prompts {PROMPTS}, {len(ACCEPTED)} rounds of {DRAFTS} drafts with per-row "
        "acceptance (by all, none, one), rollbacks to 0 and growth past the capacity: every "
        "verification and decode step equals plain decoding (within "
        f"{TOL}); truncate to -1 or past a row raises ValueError and changes nothing"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed in hidden_cases.seeds(HIDDEN_SEEDS):
        g = cases.generator(seed)
        batch = cases.randint(g, 2, 4)
        hkv = cases.choice(g, (1, 2))
        hq = hkv * cases.choice(g, (1, 2))
        t = cases.randint(g, 2, 6)
        capacity = cases.randint(g, 4, 12)
        restart_at, restart_row = (
            cases.randint(g, 0, HIDDEN_ROUNDS - 2),
            cases.randint(g, 0, batch - 1),
        )
        case = hidden_cases.name(
            seed,
            f"B={batch}, {hidden_cases.layout(hq, hkv)}, {t} drafts a "
            f"round, KVCache(capacity={capacity})",
        )
        plan = Plan()
        loop = Loop(plan, g, batch, hq, hkv, capacity)
        loop.decode([1] * batch, "prompt step 0")
        for r in range(HIDDEN_ROUNDS):
            right = [cases.randint(g, 0, 1) for _ in range(batch * t)]  # is each draft right?
            accepted = [
                next((j for j in range(t) if not right[b * t + j]), t) for b in range(batch)
            ]
            loop.round(loop.drafts(t), accepted, f"round {r} (accepting {accepted})")
            if r == restart_at:
                loop.restart([restart_row])
        bad = _bad_truncates(plan, [len(row) for row in loop.tokens], wrong_type=True)
        results = hidden_cases.run(candidate, plan, case)
        _check_loop(results, loop, case)
        _check_refusals(results, bad, case)
    return "seeded draft-and-verify loops with per-row acceptance and a rollback to 0: equal to plain decoding"


def _check_loop(results: Results, loop: Loop, case: str) -> None:
    """The verifications and decode steps, in the order they ran."""
    order = sorted(
        [(c.index, "chunk", c) for c in loop.chunks] + [(s[0], "step", s) for s in loop.steps],
        key=lambda e: e[0],
    )
    for _, kind, entry in order:
        if kind == "chunk":
            require_checks(results, [entry], case)
            continue
        index, want, what, active = entry
        got = tensor(results[index]["output"], f"{case}: {what}")
        require_shape(got, tuple(want.shape), f"{case}: {what}")
        mask = active[:, None, None]
        divergence = first_divergence(
            [got.double().where(mask, 0.0)[:, None]], [want.where(mask, 0.0)[:, None]], TOL
        )
        if divergence:
            raise Fail(
                f"{case}: {what}: the output of row {divergence.row} differs from plain "
                f"decoding of the tokens it kept ({divergence.error(TOL)}). Likely mistake: "
                "what the rollback left of each row: its length, the position decode_step "
                "rotates at (positions), or the rejected drafts' keys"
            )


def _bad_truncates(
    plan: Plan, lengths: list[int], wrong_type: bool = False
) -> list[tuple[int, int, int, str]]:
    """Truncates the contract refuses, each between two snapshots of the cache: a length of -1,
    one past a row's; with `wrong_type`, float lengths and lengths of one row too many."""
    asked = []
    for row, length, what in (
        (0, -1, "a length of -1"),
        (len(lengths) - 1, lengths[-1] + 1, "a length past the row's"),
    ):
        bad = list(lengths)
        bad[row] = length
        asked.append((cases.counts(*bad), f"truncate to {bad} ({what})"))
    if wrong_type:
        asked += [
            (cases.counts(*lengths).double(), "truncate with float64 lengths"),
            (
                cases.counts(*lengths, 0),
                f"truncate with {len(lengths) + 1} lengths for {len(lengths)} rows",
            ),
        ]
    found = []
    for value, what in asked:
        before = plan.state("c", STATE_8)
        index = plan.truncate("c", value, may_raise=True)
        found.append((before, index, plan.state("c", STATE_8), what))
    return found


def _check_refusals(results: Results, bad: list, case: str = "the public loop") -> None:
    for before, index, after, what in bad:
        got = results[index]
        if not (isinstance(got, Raised) and got.is_a("ValueError")):
            raise Fail(
                f"{case}: {what} "
                + (f"raised {got.type}" if isinstance(got, Raised) else "returned")
                + ", expected ValueError (a length below 0 or past a row's is the caller's "
                "bug, and so are lengths that are not int64 [B])"
            )
        for name in ("lengths", "positions"):
            if lengths_of(results[after], case, name) != lengths_of(results[before], case, name):
                raise Fail(
                    f"{case}: {what} raised, but changed cache.{name}: a refused call "
                    "changes nothing"
                )
        for name in ("keys", "values"):
            old, new = results[before][name], results[after][name]
            if not (
                isinstance(old, torch.Tensor)
                and isinstance(new, torch.Tensor)
                and old.shape == new.shape
                and torch.equal(old, new)
            ):
                raise Fail(
                    f"{case}: {what} raised, but changed cache.{name}: a refused call "
                    "changes nothing"
                )
