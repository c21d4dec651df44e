"""The real batched `verify` kernel against the exact law, with negative controls that must fail."""

import math

import pytest
import torch

from cactus_bench.core.rules import RULES, build_rule

from ..helpers import reference_laws as ref
from ..helpers.reference_laws import CONFIGS
from ..helpers.rules import CONTROLS, BonusFromP, OffByOne
from ..helpers.stats import P_THRESHOLD, g_test_pvalue

TRIALS = 200_000
M, V = 3, 6


def scenario(seed=11):
    """Per-position p_j, q_j with disagreeing peaks (frequent rejections), raw probs for SpecCas,
    and drafts d_j ~ p_j drawn with a generator separate from the kernel's."""
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(2.5 * torch.randn(M, V, generator=g), -1)
    q = torch.softmax(2.5 * torch.randn(M + 1, V, generator=g), -1)
    p_raw = torch.softmax(torch.randn(M, V, generator=g), -1)
    q_raw = torch.softmax(torch.randn(M + 1, V, generator=g), -1)
    drafts = torch.stack([torch.multinomial(p[j], TRIALS, replacement=True, generator=g) for j in range(M)], 1)
    return p, q, p_raw, q_raw, drafts


def run_kernel(rule, p, q, p_raw, q_raw, drafts, seed=12345):
    g = torch.Generator().manual_seed(seed)
    kw = {"draft_raw": p_raw.expand(TRIALS, M, V), "target_raw": q_raw.expand(TRIALS, M + 1, V)}
    return rule.verify(p.expand(TRIALS, M, V), q.expand(TRIALS, M + 1, V), drafts, g, **kw)


def worst_pvalue(rule, oracle=None):
    """Smallest G-test p-value over positions: the token emitted at position j, conditional on reaching
    j, must follow the oracle's law (draft rows) or q_{m+1} (bonus)."""
    oracle = oracle or rule
    p, q, p_raw, q_raw, drafts = scenario()
    v = run_kernel(rule, p, q, p_raw, q_raw, drafts)
    emitted, n_acc = v.emitted, v.n_accepted
    assert emitted.shape == (TRIALS, M + 1) and n_acc.shape == (TRIALS,)
    worst, reached_counts = 1.0, []
    for j in range(M):
        reached = n_acc >= j
        reached_counts.append(int(reached.sum()))
        if reached_counts[-1] >= 200:  # too few draws carry no evidence either way
            law = oracle.output_law(p[j], q[j], p_raw=p_raw[j], q_raw=q_raw[j])
            worst = min(worst, g_test_pvalue(emitted[reached, j], law))
    full = n_acc == M
    if int(full.sum()) >= 200:
        worst = min(worst, g_test_pvalue(emitted[full, M], q[M]))
    return worst, reached_counts


RULE_IDS = [f"{n}{p}" for n, p in CONFIGS]


@pytest.mark.parametrize("name,params", CONFIGS, ids=RULE_IDS)
def test_kernel_matches_exact_law(name, params):
    worst, reached = worst_pvalue(build_rule(name, **params))
    assert min(reached) >= 1000, f"scenario too harsh: positions reached {reached} times"
    assert worst > P_THRESHOLD


@pytest.mark.parametrize("name,params", CONFIGS, ids=RULE_IDS)
def test_kernel_output_layout(name, params):
    p, q, p_raw, q_raw, drafts = scenario()
    v = run_kernel(build_rule(name, **params), p, q, p_raw, q_raw, drafts)
    emitted, n_acc = v.emitted, v.n_accepted
    pos = torch.arange(M + 1)
    accepted = pos[:M] < n_acc[:, None]
    assert torch.equal(emitted[:, :M][accepted], drafts[accepted])  # accepted prefix = the drafts
    assert (emitted[pos > n_acc[:, None]] == -1).all()  # -1 after the last emitted token
    assert (emitted.gather(1, n_acc[:, None]) >= 0).all()  # exactly one sampled token at n_acc


# --- negative controls: each a realistic bug; the same test must reject it -----------------------


def law_shift(control, rule):
    """Largest total-variation change the control makes to any law the test looks at."""
    p, q, p_raw, q_raw, _ = scenario()

    def law(r, j, qj):
        return r.output_law(p[j], qj, p_raw=p_raw[j], q_raw=q_raw[j])

    if control is BonusFromP:
        return 0.5 * float((p[M - 1] - q[M]).abs().sum())
    if control is OffByOne:
        return max(0.5 * float((law(rule, j, q[j + 1]) - law(rule, j, q[j])).abs().sum()) for j in range(M))
    broken = control(rule)
    return max(0.5 * float((law(broken, j, q[j]) - law(rule, j, q[j])).abs().sum()) for j in range(M))


@pytest.mark.parametrize("control", CONTROLS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name,params", CONFIGS, ids=RULE_IDS)
def test_negative_control_is_rejected(control, name, params):
    rule = build_rule(name, **params)
    # A control that changes no law for this rule is not a bug for it (TAS's `sample` recovery *is* a
    # draw from q; SpecCas-OPT deferring to p never reads q): only visible changes must be caught.
    shift = law_shift(control, rule)
    if shift < 0.01:
        pytest.skip(f"{control.__name__} does not change {name}'s law here (TV {shift:.2g})")
    assert worst_pvalue(control(rule), oracle=rule)[0] < P_THRESHOLD


def test_controls_bite_on_the_paper_rules():
    """No skips allowed for SpS and Cactus: every control must change their law in this scenario."""
    for name, params in [("sps", {}), ("cactus", {"delta": 0.75})]:
        rule = build_rule(name, **params)
        for control in CONTROLS:
            assert worst_pvalue(control(rule), oracle=rule)[0] < P_THRESHOLD, (name, control.__name__)


def test_every_rule_has_a_negative_control_that_changes_its_law():
    """The parametrised control test skips a control that changes no law of a setting; each rule still has
    one that does (so a broken kernel of every rule is caught)."""
    for name in RULES:
        rule_settings = [params for n, params in CONFIGS if n == name]
        assert any(law_shift(c, build_rule(name, **ps)) >= 0.01 for ps in rule_settings for c in CONTROLS), name


def test_every_rule_at_its_sps_knob_decides_as_sps_draw_for_draw():
    """Issue 66: each relaxed rule names the setting at which it is SpS (`sps_knob`); there, on common random
    numbers, it accepts and emits what SpS does, draw for draw. Control: at its tested settings it does not."""
    p, q, p_raw, q_raw, drafts = scenario()
    sps = run_kernel(build_rule("sps"), p, q, p_raw, q_raw, drafts, seed=5)
    knobless = {name for name in RULES if RULES.get(name).sps_knob is None}
    assert knobless == {"tas", "topk"}  # thresholds on q alone: no setting is SpS
    for name in sorted(set(RULES) - knobless):
        at_knob = run_kernel(build_rule(name, **RULES.get(name).sps_knob), p, q, p_raw, q_raw, drafts, seed=5)
        assert torch.equal(at_knob.emitted, sps.emitted) and torch.equal(at_knob.n_accepted, sps.n_accepted), name
        if name != "sps":
            relaxed = [
                run_kernel(build_rule(name, **ps), p, q, p_raw, q_raw, drafts, seed=5) for n, ps in CONFIGS if n == name
            ]
            assert any(not torch.equal(v.emitted, sps.emitted) for v in relaxed), name


@pytest.mark.parametrize("name,params", CONFIGS, ids=RULE_IDS)
def test_each_row_of_a_batch_is_decided_as_it_would_be_alone(name, params):
    """Batch invariance of the decision: six rows with their own p, q, drafts and uniforms, verified together
    and one at a time, decide the same (a rule reduces over the vocabulary and the round, never the batch)."""
    g = torch.Generator().manual_seed(21)
    B = 6
    p = torch.softmax(2.5 * torch.randn(B, M, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2.5 * torch.randn(B, M + 1, V, generator=g, dtype=torch.float64), -1)
    raw = {"draft_raw": torch.softmax(torch.randn(B, M, V, generator=g, dtype=torch.float64), -1),
           "target_raw": torch.softmax(torch.randn(B, M + 1, V, generator=g, dtype=torch.float64), -1)}  # fmt: skip
    drafts = torch.multinomial(p.view(-1, V), 1, generator=g).view(B, M)
    u, counts = torch.rand(B, M + 1, generator=g, dtype=torch.float64), torch.tensor([3, 2, 3, 0, 1, 3])
    rule = build_rule(name, **params)
    together = rule.verify(p, q, drafts, uniforms=u, n_drafts=counts, return_kl=True, **raw)
    for b in range(B):
        one = {k: v[b : b + 1] for k, v in raw.items()}
        alone = rule.verify(p[b : b + 1], q[b : b + 1], drafts[b : b + 1], uniforms=u[b : b + 1],
                            n_drafts=counts[b : b + 1], return_kl=True, **one)  # fmt: skip
        assert torch.equal(alone.emitted, together.emitted[b : b + 1]), (name, b)
        assert torch.equal(alone.passed, together.passed[b : b + 1]), (name, b)


def test_approximate_spends_its_budget_within_the_round():
    """Approximate SD with a budget of one: the second position is reached with the budget spent exactly when
    the first draft was accepted only for its low regret, so its law is the mixture of the SpS law and the
    full-budget law with that probability. Control: a kernel that never runs out of budget fails it."""
    regret, t = 1.0, {"dtype": torch.float64}
    p = torch.tensor([[0.6, 0.2, 0.1, 0.1], [0.7, 0.1, 0.1, 0.1]], **t)
    q = torch.tensor([[0.3, 0.4, 0.2, 0.1], [0.2, 0.5, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]], **t)
    p0, q0 = p[0].tolist(), q[0].tolist()
    low = [math.log(max(q0)) - math.log(q0[n]) <= regret for n in range(4)]
    standard = [min(1.0, q0[n] / p0[n]) for n in range(4)]
    accepted = sum(p0[n] * (1.0 if low[n] else standard[n]) for n in range(4))
    spent = sum(p0[n] * (1 - standard[n]) for n in range(4) if low[n]) / accepted

    def law(left):
        return torch.tensor(ref.approximate_law(p[1].tolist(), q[1].tolist(), regret, left), **t)

    assert 0.1 < spent < 0.9 and 0.5 * float((law(0) - law(1)).abs().sum()) > 0.2  # the test can tell them apart
    g = torch.Generator().manual_seed(7)
    drafts = torch.stack([torch.multinomial(p[j], TRIALS, replacement=True, generator=g) for j in range(2)], 1)

    def second_position_pvalue(budget):
        rule = build_rule("approximate", max_regret=regret, budget=budget)
        v = rule.verify(p.expand(TRIALS, 2, 4), q.expand(TRIALS, 3, 4), drafts, torch.Generator().manual_seed(8))
        reached = v.n_accepted >= 1
        return g_test_pvalue(v.emitted[reached, 1], spent * law(0) + (1 - spent) * law(1))

    assert second_position_pvalue(1) > P_THRESHOLD
    assert second_position_pvalue(2) < P_THRESHOLD


def test_same_generator_seed_same_decisions_and_cactus_delta_zero_is_sps():
    p, q, p_raw, q_raw, drafts = scenario()
    a = run_kernel(build_rule("sps"), p, q, p_raw, q_raw, drafts, seed=5)
    b = run_kernel(build_rule("cactus", delta=0.0), p, q, p_raw, q_raw, drafts, seed=5)
    c = run_kernel(build_rule("sps"), p, q, p_raw, q_raw, drafts, seed=5)
    assert torch.equal(a.emitted, b.emitted) and torch.equal(a.n_accepted, b.n_accepted)
    assert torch.equal(a.emitted, c.emitted)


def test_cactus_accepts_more_than_sps_on_common_random_numbers():
    p, q, p_raw, q_raw, drafts = scenario()
    n_sps = run_kernel(build_rule("sps"), p, q, p_raw, q_raw, drafts, seed=5).n_accepted
    n_cac = run_kernel(build_rule("cactus", delta=1.0), p, q, p_raw, q_raw, drafts, seed=5).n_accepted
    assert (n_cac >= n_sps).all()  # same u: a larger acceptance probability never accepts less
    assert n_cac.double().mean() > n_sps.double().mean()


# --- shapes and edge cases -------------------------------------------------------------------------


@pytest.mark.parametrize("name,params", CONFIGS, ids=RULE_IDS)
def test_qwen3_vocabulary_at_m20(name, params):
    Vq, m = 151_936, 20
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(1, m, Vq, generator=g), -1)
    q = torch.softmax(torch.randn(1, m + 1, Vq, generator=g), -1)
    d = torch.multinomial(p[0], 1, generator=g).T
    v = build_rule(name, **params).verify(p, q, d, g, draft_raw=p, target_raw=q, return_kl=True)
    emitted, n_acc, kl_pos = v.emitted, v.n_accepted, v.kl
    assert emitted.shape == (1, m + 1) and 0 <= int(n_acc) <= m
    assert int(emitted[0, n_acc]) in range(Vq)
    if kl_pos is not None:
        assert kl_pos.shape == (1, m) and torch.isfinite(kl_pos).all() and (kl_pos >= -1e-6).all()


@pytest.mark.parametrize("name,params", CONFIGS, ids=RULE_IDS)
def test_edge_distributions(name, params):
    """One-hot q, q_n = 0, q_n = 1, tiny p_n: valid output, never an impossible token."""
    rule = build_rule(name, **params)
    onehot = torch.zeros(V)
    onehot[2] = 1.0
    tiny = torch.full((V,), (1 - 1e-7) / (V - 1))
    tiny[4] = 1e-7
    p = torch.stack([torch.full((V,), 1 / V), tiny, torch.full((V,), 1 / V)])[None]
    q = torch.stack([onehot, torch.full((V,), 1 / V), onehot, onehot])[None]
    for d in ([2, 4, 0], [0, 4, 2], [2, 4, 2]):  # q_n = 1 / q_n = 0, tiny p_n
        v = rule.verify(p, q, torch.tensor([d]), torch.Generator().manual_seed(1))
        emitted, n_acc = v.emitted, v.n_accepted
        k = int(n_acc)
        assert 0 <= k <= 3 and (emitted[0, : k + 1] >= 0).all() and (emitted[0, k + 1 :] == -1).all()
        # after a one-hot verifier row, a rule may emit only that token or (lossy rules) the draft
        for j in range(k + 1):
            if j < 3 and j in (0, 2) and name in ("sps", "cactus", "cactus_exact", "mentored"):
                assert int(emitted[0, j]) == 2  # KL-bounded / lossless rules never leave q's support


def test_zero_draft_length_is_a_verifier_sample():
    rule = build_rule("cactus")
    q = torch.zeros(4, 1, V)
    q[..., 5] = 1
    v = rule.verify(torch.zeros(4, 0, V), q, torch.zeros(4, 0, dtype=torch.int64))
    emitted, n_acc = v.emitted, v.n_accepted
    assert emitted.tolist() == [[5]] * 4 and n_acc.tolist() == [0] * 4


@pytest.mark.parametrize(
    "dp,tp,dt,match",
    [
        ((2, 3, V), (2, 3, V), (2, 3), r"target_probs must be \[B, m\+1, V\]"),
        ((2, 3), (2, 4, V), (2, 3), r"draft_probs must be \[B, m, V\]"),
        ((2, 3, V), (2, 4, V), (2, 4), r"draft_tokens must be \[B, m\]"),
        ((2, 3, V), (2, 4, V + 1), (2, 3), r"target_probs must be"),
    ],
)
def test_bad_shapes_are_clear_errors(dp, tp, dt, match):
    with pytest.raises(ValueError, match=match):
        build_rule("sps").verify(torch.full(dp, 1 / V), torch.full(tp, 1 / V), torch.zeros(dt, dtype=torch.int64))


def test_non_normalised_or_logit_inputs_are_clear_errors():
    rule = build_rule("cactus")
    good_p, good_q = torch.full((1, 2, V), 1 / V), torch.full((1, 3, V), 1 / V)
    d = torch.zeros(1, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match="rows must sum to 1"):
        rule.verify(torch.randn(1, 2, V).abs(), good_q, d)
    with pytest.raises(ValueError, match="negative"):
        rule.verify(good_p, torch.randn(1, 3, V), d)
    with pytest.raises(ValueError, match="NaN"):
        rule.verify(good_p, good_q.clone().fill_(float("nan")), d)
    with pytest.raises(ValueError, match="int64"):
        rule.verify(good_p, good_q, d.int())


# --- rows with different numbers of drafts (a batch: drafts cut at EOS or the budget) ---------------------


def ragged_worst_pvalue(rule, oracle=None, ignore_counts=False):
    """Rows with 0..M drafts that count, random numbers given as uniforms (the engine's way): where a row
    reaches position j < its count, the token there follows the exact law; a row that accepts all its k
    drafts takes its bonus from q_k; nothing past a row's count is ever accepted."""
    oracle = oracle or rule
    p, q, p_raw, q_raw, drafts = scenario()
    counts = torch.arange(TRIALS) % (M + 1)
    u = torch.rand(TRIALS, M + 1, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    kw = {"draft_raw": p_raw.expand(TRIALS, M, V), "target_raw": q_raw.expand(TRIALS, M + 1, V)}
    v = rule.verify(
        p.expand(TRIALS, M, V),
        q.expand(TRIALS, M + 1, V),
        drafts,
        uniforms=u,
        n_drafts=None if ignore_counts else counts,
        **kw,
    )
    worst = 1.0
    for k in range(M + 1):
        rows = counts == k
        emitted, n_acc = v.emitted[rows], v.n_accepted[rows]
        if not ignore_counts:
            assert int(n_acc.max()) <= k
        for j in range(k):
            reached = n_acc >= j
            law = oracle.output_law(p[j], q[j], p_raw=p_raw[j], q_raw=q_raw[j])
            worst = min(worst, g_test_pvalue(emitted[reached, j], law))
        full = n_acc == k
        if int(full.sum()) >= 200:
            worst = min(worst, g_test_pvalue(emitted[full, k], q[k]))
    return worst


@pytest.mark.parametrize("name,params", CONFIGS, ids=RULE_IDS)
def test_kernel_law_with_rows_of_different_draft_counts(name, params):
    assert ragged_worst_pvalue(build_rule(name, **params)) > P_THRESHOLD


def test_ragged_law_test_rejects_a_kernel_that_ignores_the_counts():
    """Negative control: a kernel that verifies every row's m drafts accepts past a row's EOS or budget."""
    for name, params in [("sps", {}), ("cactus", {"delta": 0.75})]:
        assert ragged_worst_pvalue(build_rule(name, **params), ignore_counts=True) < P_THRESHOLD
