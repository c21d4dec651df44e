"""Independent reference laws, written from methods.md §3 with plain Python floats and loops.

They share no code with `cactus_bench.core.rules`, so agreement with `Rule.output_law` checks each rule's
formulas, not just the sampling machinery.
"""

import math


def _norm(w):
    z = sum(w)
    return [x / z for x in w]


def general_identity_law(p, h):
    """Accept min(1, h_n/p_n), recover ∝ (h − p)+: the emitted token is distributed as h."""
    acc = [min(pi, hi) for pi, hi in zip(p, h)]
    res = [max(hi - pi, 0.0) for pi, hi in zip(p, h)]
    rej = 1 - sum(acc)
    return [a + (rej * r / sum(res) if sum(res) > 0 else 0.0) for a, r in zip(acc, res)]


def per_draft_law(p, accept, recovery):
    """P_out = Σ_n p_n [a_n δ_n + (1 − a_n) R_n], with accept(n) and recovery(n) given per drafted n."""
    V = len(p)
    out = [0.0] * V
    for n in range(V):
        a = accept(n)
        out[n] += p[n] * a
        if a < 1:
            r = _norm(recovery(n))
            for x in range(V):
                out[x] += p[n] * (1 - a) * r[x]
    return out


def cactus_h(q, n, gamma):
    qn = q[n]
    scale = 1.0 if qn == 1 else (1 - gamma) / (1 - qn)
    return [gamma if i == n else qi * scale for i, qi in enumerate(q)]


def cactus_gamma(qn, delta):
    return min(qn + math.sqrt(2 * delta * qn * (1 - qn)), 1.0)


def binary_kl(g, qn):
    a = g * math.log(g / qn) if g > 0 else 0.0
    b = (1 - g) * math.log((1 - g) / (1 - qn)) if g < 1 else 0.0
    return a + b


def cactus_exact_gamma(qn, delta):
    if qn == 0:
        return 0.0
    if -math.log(qn) <= delta:
        return 1.0
    lo, hi = qn, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if binary_kl(mid, qn) <= delta:
            lo = mid
        else:
            hi = mid
    return lo


def cactus_law(p, q, gamma_fn):
    def h_of(n):
        return cactus_h(q, n, gamma_fn(q[n]))

    def accept(n):
        return min(1.0, h_of(n)[n] / p[n]) if p[n] > 0 else 0.0

    def recovery(n):
        h = h_of(n)
        res = [max(hi - pi, 0.0) for hi, pi in zip(h, p)]
        return res if sum(res) > 0 else list(q)

    return per_draft_law(p, accept, recovery)


def tas_law(p, q, epsilon=0.09, alpha=None, recovery="argmax"):
    alpha = math.sqrt(epsilon) if alpha is None else alpha
    entropy = -sum(qi * math.log(qi + 1e-5) for qi in q)
    thr = min(epsilon, alpha * math.exp(-entropy))
    best = max(range(len(q)), key=lambda i: q[i])
    rec = [1.0 if i == best else 0.0 for i in range(len(q))] if recovery == "argmax" else list(q)
    return per_draft_law(p, lambda n: 1.0 if q[n] > thr else 0.0, lambda n: rec)


def topk_law(p, q, k=5, require_support=False):
    tau = sorted(q, reverse=True)[min(k, len(q)) - 1]
    top = [1.0 if (qi >= tau and (qi > 0 or not require_support)) else 0.0 for qi in q]
    res = [max(t - pi, 0.0) for t, pi in zip(top, p)]
    return per_draft_law(p, lambda n: top[n], lambda n: res if sum(res) > 0 else list(q))


def interp_law(p, q, alpha):
    return general_identity_law(p, [alpha * pi + (1 - alpha) * qi for pi, qi in zip(p, q)])


def mentored_law(p, q, beta):
    acc = [min(pi, qi / beta) for pi, qi in zip(p, q)]
    res = [max(qi - beta * pi, 0.0) for pi, qi in zip(p, q)]
    rej = 1 - sum(acc)
    return [a + (rej * r / sum(res) if sum(res) > 0 else rej * qi) for a, r, qi in zip(acc, res, q)]


def kl(h, q):
    return sum(hi * math.log(hi / qi) for hi, qi in zip(h, q) if hi > 0)


def entropy(x):
    return -sum(xi * math.log(xi) for xi in x if xi > 0)


def speccas_law(p, q, variant, alpha, p_raw=None, q_raw=None):
    pr, qr = p_raw or p, q_raw or q
    if variant == "token_v3":
        mq = max(qr)
        t = [1.0 if qi >= (1 - alpha) * mq else 0.0 for qi in qr]
        kept = sum(pi * ti for pi, ti in zip(p, t))
        return general_identity_law(p, [pi * ti + (1 - kept) * qi for pi, ti, qi in zip(p, t, q)])
    tv = 0.5 * sum(abs(a - b) for a, b in zip(pr, qr))
    trusted = {
        "opt": lambda: max(pr) >= max(qr) - alpha * tv,
        "diff": lambda: max(pr) >= max(qr) - alpha,
        "chow": lambda: max(pr) >= 1 - alpha,
        "entropy": lambda: entropy(pr) <= entropy(qr) + alpha * tv,
    }[variant]()
    return general_identity_law(p, list(p) if trusted else list(q))


def lenience_law(p, q, lenience):
    acc = [pi if lenience == 0 else min(pi, qi / lenience) for pi, qi in zip(p, q)]
    res = [max(qi - lenience * pi, 0.0) for pi, qi in zip(p, q)]
    rej = 1 - sum(acc)
    return [a + (rej * r / sum(res) if sum(res) > 0 else rej * qi) for a, r, qi in zip(acc, res, q)]


def jsd(p, q):
    m = [(a + b) / 2 for a, b in zip(p, q)]
    return max(entropy(m) - (entropy(p) + entropy(q)) / 2, 0.0)


def fuzzy_law(p, q, threshold, divergence="jsd"):
    d = jsd(p, q) if divergence == "jsd" else 0.5 * sum(abs(a - b) for a, b in zip(p, q))
    return general_identity_law(p, list(p) if d < threshold else list(q))


def standard_residual(p, q):
    res = [max(qi - pi, 0.0) for pi, qi in zip(p, q)]
    return res if sum(res) > 0 else list(q)


def nucleus_law(p, q, top_p):
    def accept(n):
        in_nucleus = q[n] > 0 and sum(qi for qi in q if qi > q[n]) < top_p
        return 1.0 if in_nucleus else (min(1.0, q[n] / p[n]) if p[n] > 0 else 0.0)

    return per_draft_law(p, accept, lambda n: standard_residual(p, q))


def approximate_law(p, q, max_regret, budget_left):
    """The law of a position reached with `budget_left` low-regret acceptances still to spend."""

    def accept(n):
        low = q[n] > 0 and math.log(max(q)) - math.log(q[n]) <= max_regret + 1e-12
        return 1.0 if (low and budget_left > 0) else (min(1.0, q[n] / p[n]) if p[n] > 0 else 0.0)

    return per_draft_law(p, accept, lambda n: standard_residual(p, q))


# --- each rule's reference law by its registered name, with the settings the oracle tests build it with ---
# A new rule adds one entry here; every oracle, kernel and decode test then covers it (and a registered rule
# without an entry fails `test_every_registered_rule_is_covered`).
LAWS = {}


def law(name, *settings):
    """Register `fn(p, q, params, rule) -> law` (float lists) as rule `name`'s reference, tested at `settings`."""

    def deco(fn):
        LAWS[name] = (fn, list(settings))
        return fn

    return deco


@law("sps", {})
def _sps(p, q, params, rule):
    return general_identity_law(p, q)


@law("cactus", {"delta": 0.75}, {"delta": 0.0})
def _cactus(p, q, params, rule):
    return cactus_law(p, q, lambda qn: cactus_gamma(qn, params["delta"]))


@law("cactus_exact", {"delta": 0.5})
def _cactus_exact(p, q, params, rule):
    return cactus_law(p, q, lambda qn: cactus_exact_gamma(qn, params["delta"]))


@law("tas", {}, {"epsilon": 0.3, "recovery": "sample"})
def _tas(p, q, params, rule):
    return tas_law(p, q, params.get("epsilon", 0.09), None, params.get("recovery", "argmax"))


@law("topk", {"k": 3}, {"k": 8, "require_support": True})
def _topk(p, q, params, rule):
    return topk_law(p, q, params["k"], params.get("require_support", False))


@law("interp", {"alpha": 0.4})
def _interp(p, q, params, rule):
    return interp_law(p, q, params["alpha"])


@law("mentored", {"divergence": 0.05})
def _mentored(p, q, params, rule):  # β is the rule's (its budget is tested on its own)
    import torch

    t = {"dtype": torch.float64}
    return mentored_law(p, q, float(rule.beta(torch.tensor(p, **t), torch.tensor(q, **t))))


@law(
    "speccas",
    {"variant": "token_v3", "alpha": 0.5},
    {"variant": "opt", "alpha": 0.3},
    {"variant": "diff", "alpha": 0.0},
    {"variant": "chow", "alpha": 0.5},
    {"variant": "entropy", "alpha": 0.2},
)
def _speccas(p, q, params, rule):
    return speccas_law(p, q, params["variant"], params["alpha"])


@law("lenience", {"lenience": 0.5}, {"lenience": 0.0})
def _lenience(p, q, params, rule):
    return lenience_law(p, q, params["lenience"])


@law("fuzzy", {"threshold": 0.3}, {"threshold": 0.5, "divergence": "tv"})
def _fuzzy(p, q, params, rule):
    return fuzzy_law(p, q, params["threshold"], params.get("divergence", "jsd"))


@law("nucleus", {"top_p": 0.8})
def _nucleus(p, q, params, rule):
    return nucleus_law(p, q, params["top_p"])


# a budget of 3 never binds within the kernel tests' m = 3 drafts: every position's law is the first's (the
# binding budget is tested on its own)
@law("approximate", {"max_regret": 1.0, "budget": 3})
def _approximate(p, q, params, rule):
    return approximate_law(p, q, params["max_regret"], params["budget"])


# every rule with the settings its law is tested at, as built by name
CONFIGS = [(name, params) for name, (_, settings) in LAWS.items() for params in settings]
