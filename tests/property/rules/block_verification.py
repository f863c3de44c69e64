"""Block verification (Sun et al., arXiv 2403.10444, Algorithm 2) as a drop-in for the reference sampler.

A lossless rule that decides the accepted prefix jointly, scanning the block from its end, so its block
law differs from chain sampling's. The verify cap is applied after it, as SGLang applies it after its
block-verification kernel. Written from the paper, vectorised over the batch.
"""

import torch

from dspark.verify.results import AcceptOut


def block_verification_accept(candidates, target_probs, draft_probs, coins, resample_noise, verify_lens=None):
    bs, width = candidates.shape
    gamma = width - 1
    cand = candidates.to(torch.int64)
    drafts = cand[:, 1:]
    p = target_probs.to(torch.float64)
    if draft_probs is None:  # a one-hot draft on the candidates
        q = torch.nn.functional.one_hot(drafts, p.shape[-1]).to(torch.float64)
    else:
        q = draft_probs.to(torch.float64)
    p_d = p[:, :gamma].gather(2, drafts[:, :, None])[:, :, 0]
    q_d = q.gather(2, drafts[:, :, None])[:, :, 0]
    # prefix[i]: min(prefix[i-1] * p(d_i) / q(d_i), 1), prefix[0] = 1.
    prefix = [torch.ones(bs, dtype=torch.float64)]
    for i in range(gamma):
        ratio = torch.where(q_d[:, i] > 0, p_d[:, i] / q_d[:, i].clamp_min(1e-300), 0.0)
        prefix.append(torch.minimum(prefix[-1] * ratio, torch.ones(())))
    # h_i: the probability that the block stops exactly after i drafts, given it reached the scan at i.
    tau = torch.zeros(bs, dtype=torch.int64)
    decided = torch.zeros(bs, dtype=torch.bool)
    for i in range(gamma, 0, -1):
        r = prefix[i]
        if i < gamma:
            mass = (r[:, None] * p[:, i] - q[:, i]).clamp_min(0).sum(-1)
            h = torch.where((r > 0) & (r < 1), mass / (mass + 1 - r), r)
        else:
            h = r
        take = ~decided & (coins[:, i - 1].to(torch.float64) < h)
        tau = torch.where(take, i, tau)
        decided |= take
    rows = torch.arange(bs)
    scale = torch.stack(prefix, 1)[rows, tau]
    p_tau = p[rows, tau]
    q_tau = torch.where((tau < gamma)[:, None], q[rows, tau.clamp(max=gamma - 1)], 0.0)
    weights = (scale[:, None] * p_tau - q_tau).clamp_min(0)
    weights = torch.where((weights > 0).any(1, keepdim=True), weights, p_tau)
    drawn = torch.argmax(weights * resample_noise.to(torch.float64), dim=1)
    lens = torch.full_like(tau, width) if verify_lens is None else verify_lens.to(torch.int64)
    capped = torch.minimum(tau, lens - 1)
    bonus = torch.where(capped < tau, cand[rows, (capped + 1).clamp(max=gamma)], drawn)
    return AcceptOut(capped.to(torch.int32), bonus, (tau - capped).to(torch.int32))
