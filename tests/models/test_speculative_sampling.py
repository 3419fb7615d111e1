"""Speculative sampling keeps the output distribution: the first three tokens generated with drafts
(prompt lookup, a draft model) follow the exact joint distribution of plain sampling (computed from the
target's logits with the same sampling_probs), by a chi-square test on fixed seeds; the same test rejects
deliberately wrong acceptance rules, so it can fail. And the rule itself on synthetic distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orion.models import Model, speculative
from orion.models.sampling import SamplingParams, draw, sampling_probs

from models_helpers import tiny_gpt2, weights16

PROMPT = [5, 9, 13, 5, 9, 13, 5, 9, 40, 5, 9]
OPTS = dict(max_tokens=3, temperature=2.0, top_k=2, repetition_penalty=1.3)   # 8 possible 3-token outputs
N = 400            # samples per check (3000 give p-values of 0.85 / 0.92 for the two kinds of drafts)


@pytest.fixture(scope="module")
def models():
    cfg = tiny_gpt2(vocab_size=64, n_ctx=32)
    w = weights16(cfg)
    rng = np.random.default_rng(5)     # a draft that is close to the target, not equal (acceptance ~0.85)
    wd = {k: (v.astype(np.float32) + 0.1 * np.std(v) * rng.standard_normal(v.shape)).astype(np.float16)
          for k, v in w.items()}
    return Model(cfg, w, device="sim", stop_tokens=[]), Model(cfg, wd, device="sim", stop_tokens=[])


def exact_joint(m, prompt, params, n):
    """{first n tokens: probability} of plain sampling, from the target's logits of every prefix."""
    dist = {(): 1.0}
    for _ in range(n):
        nxt = {}
        for pre, pr in dist.items():
            h = prompt + list(pre)
            p = sampling_probs(m.logits(h)[-1], params, h)
            for t in np.flatnonzero(p):
                nxt[pre + (int(t),)] = pr * p[t]
        dist = nxt
    return dist


def chi2_sf(x: float, k: int) -> float:
    """P(chi-square with k degrees of freedom > x), closed forms for integer k."""
    h = x / 2
    if k % 2 == 0:
        term = s = 1.0
        for i in range(1, k // 2):
            term *= h / i
            s += term
        return math.exp(-h) * s
    s, term = math.erfc(math.sqrt(h)), math.sqrt(h) * math.exp(-h) / math.gamma(1.5)
    for i in range((k - 1) // 2):
        s += term
        term *= h / (i + 1.5)
    return s


def fit_p_value(samples, dist) -> float:
    """Chi-square goodness of fit of ``samples`` to ``dist`` (outcomes expected fewer than 5 times merged
    into one cell); 0 when an outcome of probability 0 occurs."""
    n = len(samples)
    if any(s not in dist for s in samples):
        return 0.0
    counts = {k: 0 for k in dist}
    for s in samples:
        counts[s] += 1
    big = [k for k in dist if dist[k] * n >= 5]
    cells = [(counts[k], dist[k] * n) for k in big]
    rest = [k for k in dist if k not in big]
    if rest:
        cells.append((sum(counts[k] for k in rest), sum(dist[k] for k in rest) * n))
    x = sum((o - e) ** 2 / e for o, e in cells)
    return chi2_sf(x, len(cells) - 1)


def _sample(m, n=N, **kw):
    gens = [m.generate(PROMPT, seed=s, **OPTS, **kw) for s in range(n)]
    return [tuple(g.tokens) for g in gens], sum(g.drafted for g in gens), sum(g.accepted for g in gens)


@pytest.fixture(scope="module")
def target_joint(models):
    return exact_joint(models[0], PROMPT, SamplingParams(**OPTS), 3)


@pytest.mark.parametrize("drafts", ["prompt-lookup", "draft model"])
def test_speculative_sampling_matches_plain_sampling(models, target_joint, drafts):
    m, d = models
    kw = {"speculative": "prompt-lookup"} if drafts == "prompt-lookup" else {"speculative": d, "draft_k": 2}
    samples, drafted, accepted = _sample(m, **kw)
    assert 0 < accepted < drafted              # both branches of the rule ran, many times
    assert drafted - accepted > 20 and accepted > 20
    assert fit_p_value(samples, target_joint) > 1e-3


def _always_accept(p, draft, q, rng):
    return list(draft) + [draw(p(len(draft)), rng)]


def _reject_to_p(p, draft, q, rng):
    """The acceptance test right, but a rejected draft replaced by a draw from p (not max(0, p - q))."""
    out = []
    for i, x in enumerate(draft):
        pi, qx = p(i), (1.0 if q is None else q[i][x])
        if rng.random() * qx < pi[x]:
            out.append(x)
            continue
        return out + [draw(pi, rng)]
    return out + [draw(p(len(draft)), rng)]


@pytest.mark.parametrize("rule", [_always_accept, _reject_to_p])
def test_the_check_rejects_wrong_acceptance_rules(models, target_joint, rule, monkeypatch):
    m, d = models
    monkeypatch.setattr(speculative, "accept_drafts", rule)
    samples, _, _ = _sample(m, n=200, speculative=d, draft_k=2)      # at 400 samples these give p < 1e-12
    assert fit_p_value(samples, target_joint) < 1e-3


def test_rule_on_synthetic_distributions():
    """Many rounds of accept_drafts with known p and q: the first token kept is distributed as p(0), for
    sampled and for point-mass drafts."""
    rng = np.random.default_rng(0)
    V = 6
    p0, q0 = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    p1 = rng.dirichlet(np.ones(V))
    p = lambda i: (p0, p1)[i]            # noqa: E731
    for point_mass in (False, True):
        first = []
        for _ in range(8000):
            x = 2 if point_mass else draw(q0, rng)
            got = speculative.accept_drafts(p, [x], None if point_mass else [q0], rng)
            assert 1 <= len(got) <= 2 and (len(got) == 1 or got[0] == x)
            first.append((got[0],))
        assert fit_p_value(first, {(t,): p0[t] for t in range(V)}) > 1e-3


def test_greedy_is_the_point_mass_case():
    """temperature 0: sampling_probs is one-hot at the argmax; a draft is kept exactly when it is the
    argmax and the token added is the argmax, whatever the draft distribution says."""
    rng = np.random.default_rng(0)
    z0, z1 = rng.standard_normal(10), rng.standard_normal(10)
    g = SamplingParams(temperature=0)
    p = lambda i: sampling_probs((z0, z1)[i], g)      # noqa: E731
    a0, a1 = int(np.argmax(z0)), int(np.argmax(z1))
    other = (a0 + 1) % 10
    for q in (None, [np.full(10, 0.1)], [np.eye(10)[other]]):        # lookup, sampled, greedy draft model
        assert speculative.accept_drafts(p, [a0], q, rng) == [a0, a1]
        assert speculative.accept_drafts(p, [other], q, rng) == [a0]
