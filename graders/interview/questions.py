"""What the interviewer says in `kata interview`: each stage's prompt, the conceptual questions
asked with it, and the model answer each question is shown beside when the session ends.

Written from the question's own framing ("contract first", the L4/L5/L6 answers, the GQA
follow-up). A stage's prompt and questions are shown only once the stage opens (contract
section 7): nothing here is written into the workspace before then.

Which question belongs to which stage is the rubric's: each interviewer-only item carries a
`level` (rubric/rubric.toml). Every interviewer-only item has a QUESTIONS and a MODEL_ANSWERS
entry (tests/test_interview.py).
"""

from __future__ import annotations

STAGE_PROMPTS = {
    "L4": """\
Let's implement incremental decoding with a KV cache. Contract first: keys and values are
[batch, kv_heads, time, head_dim], and the newest token's query is [batch, query_heads, 1,
head_dim]. Start with equal heads. In kv_cache.py, `append` adds the new token's keys and
values to the cache, and `attend` computes one output position for the newest query against
everything cached: scores, the 1/sqrt(head_dim) scale, a softmax over the cached positions,
times the values. Return that one position and keep the grown cache. A plain version is fine
for now; tell me what you would change later. The invariant I care about: the newest token's
output must equal a full causal forward pass over the same prefix.""",
    "L5": """\
Good, the shapes work. Now show me it is right, and make it survive real traffic. Write a
test in test_kv_cache.py that compares your cached output with full causal attention at every
prefix. Validate what is appended (batch, heads, head_dim, rank, dtype, device) and leave the
cache untouched when you refuse. Keep the softmax in float32 and stable for large logits. Then
the lifecycle: `reset` between unrelated sequences, `release` when one sequence hits EOS or is
cancelled, lengths tracked apart from capacity, a batch whose rows have different lengths,
and a `decode_step` that projects only the new token.""",
    "L6": """\
Now the follow-ups. How does GQA change your implementation? Make `attend` work when there
are fewer KV heads than query heads, without duplicating the stored cache. Apply RoPE at each
token's absolute position, and keep it right for a forked cache. For beam search, `reorder`
and `fork`: the cache follows the hypotheses, and finished beams stop growing. Take bf16 and
fp16 caches with float32 scores and softmax. And if your append concatenates every step,
make single-token appends reallocate O(log n) times, not n.""",
    "L6+": """\
Past L6: speculative decoding and long context. A draft model proposes a few tokens at a time;
append them as one chunk and write `attend_chunk`, which verifies the chunk's t queries in one
call, each attending its row's positions up to its own and no later one. Roll the rejected
drafts back with `truncate`, each row keeping its own number of accepted drafts, so that
nothing dropped is ever attended again. Then `KVCache(window=W)`: a sliding window that keeps
only the last W positions (W + t - 1 right after a chunk of t) in a ring buffer, with RoPE still
at absolute positions, which `positions` counts.""",
    "serving": """\
Past the single cache: a server decodes many sequences out of one pool of memory. In
paged_kv_cache.py, keep each sequence's keys and values in fixed-size blocks of a shared pool,
with a block table per sequence, and attend through it exactly as a dense cache would. Free a
finished sequence's blocks, share a forked prefix copy-on-write, admit a request only if its
future growth fits, evict when the pool runs out, and store K and V as int8 when asked.""",
}

QUESTIONS = {
    "why-only-kv": "Why do you cache only K and V, and not Q or the hidden states?",
    "no-future-mask": "Your attend applies no causal mask. Why is that correct?",
    "total-still-quadratic": "With the cache, is generating n tokens linear in n? What does "
    "one step cost, and what does the whole generation cost?",
    "cache-ownership": "Who owns a cache across requests? What happens at EOS, on "
    "cancellation, and when a new request arrives?",
    "serving-memory": "Your cache is one tensor per layer. What changes in a server that "
    "decodes hundreds of sequences? Give me the memory figures for a Llama-8B "
    "shaped model.",
    "gqa-memory": "What exactly does GQA save? Take Llama-8B's 32 query heads and 8 KV heads.",
    "why-chunk-mask": "Decoding one token needs no causal mask. Why does verifying k drafts in "
    "one call need one?",
    "window-trade": "What does a sliding window save in memory, and what does it lose in what "
    "the model can see?",
    "rejected-draft-cost": "The verifier rejects some drafts. What did they cost in compute, and "
    "what do they cost in the cache?",
    "why-iteration-level": "Why schedule at every step instead of batching requests together "
    "until the batch is done?",
    "recompute-or-swap": "Your pool is full and a running request needs a block. Whom do you "
    "preempt, and do you recompute it later or swap its K and V out?",
    "token-budget": "What does max_batched_tokens trade, and why chunk a long prompt rather "
    "than prefill it in one step?",
}

MODEL_ANSWERS = {
    "why-only-kv": """\
A past token's query is used once, at its own step, and never read again: later tokens attend
with their own query against all past keys and values. Keys and values are what every later
step reads, so they are what is cached; caching Q costs memory for nothing. Caching the
hidden states instead would force re-projecting the whole prefix every step, O(T) matrix
products per layer per token, which is exactly the work the cache exists to avoid. In
decode_step, only the new token is projected, and its k (after RoPE) and v are appended.""",
    "no-future-mask": """\
A causal mask stops a position from seeing positions after it. In incremental decoding the
query is the newest token, and the cache holds only its prefix and itself: there is no future
position in the cache to block. Every cached key is one the query is allowed to see, so the
mask would be all ones. The mask comes back only when a step attends with several queries at
once (a prefill chunk, speculative tokens); then each of them must not see the later ones.""",
    "total-still-quadratic": """\
One step with a cache is linear in the prefix: the newest query against T cached keys is O(T)
per head, and the projections are O(1) in T. What the cache removes is recomputing the
prefix's projections, which made each step O(T) in matmuls as well. But attention over a
generation of n tokens still sums 1 + 2 + ... + n = n(n+1)/2 score computations: total
attention stays quadratic. Making it linear needs a different model (sliding windows,
linear attention, state-space layers), not a cache.""",
    "cache-ownership": """\
A cache belongs to one request (one sequence, or one beam group) and lives as long as it:
reset it before an unrelated sequence, release a slot at EOS or on cancellation so that its
length is 0 and a new sequence in that slot never sees the old keys, and never hand a live
cache to another request. Sharing is allowed only explicitly and read-only: a fork, or a
copy-on-write prefix in a paged pool with reference counts. Leaking a cache across requests
is both a correctness bug (attending to someone else's tokens) and a privacy one.""",
    "serving-memory": """\
A Llama-8B shaped model (32 layers, 8 KV heads, head_dim 128) in bf16 holds 2 x 32 x 8 x 128
x 2 bytes = 128 KiB of K and V per token: 1 GiB for one 8,192-token sequence, so 16 GiB of
cache holds 131,072 tokens across all requests. A toy cache that concatenates every step
copies the whole cache each token, and one preallocated for max length wastes most of it
(fragmentation). A server pages the cache into fixed blocks of a shared pool with a block
table per sequence, shares prompt prefixes copy-on-write, admits a request only if its
future growth fits, evicts or preempts under pressure, and may quantize K and V to int8
(half of bf16's bytes).""",
    "gqa-memory": """\
With GQA the cache stores only the KV heads: query head h reads KV head h // (Hq / Hkv), and
attend groups the queries onto the stored heads (a reshape or an index) without duplicating
K and V. Llama-8B has 32 query heads and 8 KV heads: 128 KiB per token in bf16 instead of
512 KiB with 32 KV heads, 4x less cache and 4x less memory read per decode step, which is
what bounds decoding. At 8,192 tokens that is 1 GiB per sequence instead of 4 GiB. MQA (one
KV head) saves 32x, at some cost in quality; the compute per step is unchanged.""",
    "why-chunk-mask": """\
Decoding one token, the cache holds only the query's past and itself, so there is nothing to
hide. To verify k drafts they are all appended first and attended in one call: when draft i's
query attends, the drafts after it are already in the cache, and the target model never saw
them when it would have produced token i. So query i, at position positions - k + i, must see
its row's positions up to its own and no later one, the mask a prefill uses. Without it, on the
kata's measurement (T=4096, k=4), query 0 sees 3 later positions and is off by 3.44e-03, about
340 times the float32 tolerance: a verifier that accepts drafts the model would not
have produced.""",
    "window-trade": """\
A window keeps the last W positions, W slots per layer (W + t - 1 right after a chunk of t)
whatever the length, where a full cache grows by one slot a token. At T=16384 with W=1024 (8
KV heads, head_dim 128, float32) that is 8 MiB against 128 MiB of K and V, and a decode
step reads 1,024 positions: 1.15 ms against 29.1 ms for the full cache on the kata's
machine, flat in T. What it loses: a token more than W positions back is no longer attended at
that layer, and reaches the present only through the hidden states in between, at most
W x layers positions back (Mistral 7B: 4096 x 32), weaker with distance. So the window is a
property the model was trained with, not a cache setting to switch on for any model.""",
    "rejected-draft-cost": """\
In compute, a rejected draft cost its draft-model step and one position of the verification
pass; that pass reads the cache once for all k queries, so on the kata's machine verifying 4
drafts at T=4096 took 1.17x one decode step, against 4x to decode them one by one. A rejection
therefore wastes little of the target's time, as long as enough drafts are accepted to pay for
the drafter. In the cache, its K and V were written past the accepted length: `truncate` sets
each row's length back (5 microseconds), copies nothing, keeps the capacity for the next
drafts, and the stale slots are never read again because attention masks by lengths. A windowed
cache keeps W + k - 1 slots after a chunk of k, so that rolling it back never needs a position
it has overwritten.""",
    "why-iteration-level": """Requests in one batch want different numbers of tokens: with static batching, a request that
needs 10 tokens holds its slot while another in the batch generates 500, and requests that
arrive meanwhile wait for the whole batch to end. Scheduling at every step (Orca's
iteration-level scheduling, vLLM's continuous batching) frees a finished request's slot and
blocks at once and admits the next waiting request in the same step, so the batch stays full.
On the kata's mixed workload the reference takes 91 steps where static batching takes 160
(0.57x), with the same model and budgets.""",
    "recompute-or-swap": """Blocks are taken as sequences grow, so growth can run out of them; then some running request
must give its blocks back. The newest is the victim: it has done the least work, so the least
is lost, and the oldest keep their place. Recompute drops its K and V and later prefills its
prompt and its produced tokens again in one chunked pass, which costs compute but no memory
or transfer. Swapping copies its blocks to host memory and back: for a Llama-8B shaped model
that is 128 KiB per token in bf16, 128 MiB for a 1,024-token request each way over PCIe, and
host memory to hold it. vLLM recomputes by default because a prefill runs at full batch
efficiency while the decode it displaced was memory-bound.""",
    "token-budget": """max_batched_tokens bounds the positions one step computes. A larger step uses the hardware
better (more tokens per weight read), but a step lasts as long as its work, and every running
request gets at most one token per step: a 4,000-token prompt prefilled in one step stalls
every decode behind it for that step. Chunked prefill computes a long prompt a chunk a step,
after the decodes, so the time between two tokens of a decode stays bounded while the prompt
still advances. The budget is the dial between throughput and inter-token latency.""",
}
