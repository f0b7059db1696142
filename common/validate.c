/* validate.c - the parameter checks every step's fa2_supports() starts with
 * (linked into each step's binary and shared library). */
#include <stdio.h>

#include "harness.h"

int fa2_validate_params(const fa2_params *p, char *why, size_t why_len)
{
#define REFUSE(...) do { if (why) snprintf(why, why_len, __VA_ARGS__); return 0; } while (0)
    if (!p) REFUSE("params is NULL");
    if (!p->q || !p->k || !p->v || !p->o) REFUSE("q, k, v and o must all be set");
    if (p->batch < 1 || p->heads_q < 1 || p->heads_kv < 1 || p->seqlen_q < 1 || p->seqlen_k < 1 || p->head_dim < 1)
        REFUSE("batch, heads, seqlens and head_dim must be >= 1");
    if (p->heads_q % p->heads_kv) REFUSE("heads_q %d is not a multiple of heads_kv %d", p->heads_q, p->heads_kv);
    if (p->dtype != FA2_FP16 && p->dtype != FA2_BF16) REFUSE("dtype %d (allowed: fp16, bf16)", (int)p->dtype);
    if (p->causal != 0 && p->causal != 1) REFUSE("causal %d (allowed: 0, 1)", p->causal);
    if (!(p->softmax_scale > 0)) REFUSE("softmax_scale must be > 0");
    return 1;
#undef REFUSE
}
