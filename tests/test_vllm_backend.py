"""engine=vllm without vLLM: what the default suite can check of the backend (its config, its place in a
run's identity, and how a generation's rounds are rebuilt from the plugin's record); `make test-vllm` runs
it against vLLM itself (tests/test_vllm.py)."""

import importlib.util

import pytest

from cactus_bench.app import run as run_mod
from cactus_bench.app.config import ConfigError, validate
from cactus_bench.app.identity import RunIdentity
from cactus_bench.decode.backends.vllm import INSTALL
from cactus_bench.decode.backends.vllm.decoder import build_rounds

from .helpers.configs import cfg_of
from .helpers.guards import refuse

NAN = float("nan")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_engine_vllm_without_vllm_says_how_to_install_it_before_anything_loads(monkeypatch):
    monkeypatch.setattr(run_mod, "get_decoder", refuse("loaded a model without vLLM"))
    with pytest.raises(ConfigError) as e:
        run_mod.run(cfg_of("engine=vllm", "method=cactus"))
    assert str(e.value) == INSTALL and "make test-vllm" in INSTALL and "engine=auto" in INSTALL


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["engine.settings.drafter_warp=top"], "engine.settings.drafter_warp='top' is not valid: verifier"),
        (["+engine.settings.gpu_util=0.5"], "engine.settings.gpu_util is not a vllm setting"),
        (["engine.settings.kv_cache_gib=0"], "engine.settings.kv_cache_gib=0 is not valid"),
        (["engine.name=fast"], "engine.name='fast' is not valid for engine.backend=vllm"),
    ],
)
def test_bad_vllm_settings_are_one_paragraph(overrides, match):
    with pytest.raises(ConfigError, match=match):
        validate(cfg_of("engine=vllm", *overrides))


def test_tensor_parallelism_needs_a_backend_that_shards():
    with pytest.raises(ConfigError, match="engine.backend=hf does not shard a model: use engine=vllm"):
        validate(cfg_of("pair.tensor_parallel_size=2"))
    with pytest.raises(ConfigError, match="pair.tensor_parallel_size=0 is not valid"):
        validate(cfg_of("pair.tensor_parallel_size=0"))


def test_the_engine_is_part_of_a_runs_identity_only_where_it_changes_the_tokens():
    """hf's engines decode the same tokens (and the key of every hf run is what it was before vLLM came);
    vllm's decode other random streams, and its drafter_warp another law."""
    hf = RunIdentity.of(cfg_of("method=cactus"))
    assert RunIdentity.of(cfg_of("method=cactus", "engine=eager")).key == hf.key
    assert "engine" not in hf.as_dict()
    vllm = RunIdentity.of(cfg_of("method=cactus", "engine=vllm"))
    own = RunIdentity.of(cfg_of("method=cactus", "engine=vllm", "engine.settings.drafter_warp=temperature"))
    assert len({hf.key, vllm.key, own.key}) == 3
    assert vllm.engine == {"backend": "vllm", "drafter_warp": "verifier"}
    assert RunIdentity.of(cfg_of("method=cactus", "engine=vllm", "engine.settings.kv_cache_gib=2")).key == vllm.key
    # a run's references (SpS for Rej, the verifier alone for speedup) are on the same engine
    assert vllm.reference("baseline").engine == vllm.engine


def round_(before, drafted, accepted, passes, kl=0.1):
    return [before, drafted, accepted, sum(passes), kl, accepted + 1, 0.2, accepted + 1, 0, 0.001, passes]


def test_rounds_are_rebuilt_from_the_drafting_steps():
    """The prefill's token and steps without drafts are verifier calls that emit one token each, found in
    the gaps between recorded rounds; a generation that stops inside its last round cuts it there."""
    recorded = [round_(1, 4, 2, [1, 1, 0, 1]), round_(4, 4, 4, [1, 1, 1, 1]), round_(10, 4, 0, [0, 1, 0, 0])]
    r = build_rounds(recorded, 12, wall=2.0, length_stop=False)
    # prefill (1 token), round at 1 (3 tokens), round at 4 (5), a step without drafts at 9, round at 10 (1),
    # then one more token from a step without drafts
    assert r.drafted == [0, 4, 4, 0, 4, 0]
    assert r.emitted == [1, 3, 5, 1, 1, 1] and sum(r.emitted) == 12
    assert r.accepted == [0, 2, 4, 0, 0, 0] and r.accepted_any == [0, 3, 4, 0, 1, 0]
    assert r.t_other[-1] == pytest.approx(2.0 - 3 * 0.001) and r.kl_count == [0, 3, 5, 0, 1, 0]

    eos = build_rounds([round_(1, 4, 4, [1, 1, 1, 1])], 3, wall=1.0, length_stop=False)  # EOS as its 2nd token
    assert eos.emitted == [1, 2] and eos.accepted == [0, 2] and eos.drafted == [0, 4]

    no_kl = build_rounds([[1, 4, 1, 1, 0.0, NAN, 0.0, 0, 0, 0.0, [1, 0, 0, 0]]], 3, wall=1.0, length_stop=False)
    assert no_kl.kl_count == [0, 0]  # a target-free rule: no target KL counted


def test_at_the_token_budget_only_the_drafts_it_left_room_for_count():
    """vLLM drafts m whatever is left; our engine drafts at most the tokens left but one. With 2 tokens of
    budget left, a round that drafted 4 (passing 1, 1, 0, 1) counts 1 draft, accepted, and emits 2 tokens, as
    our engine's round would."""
    r = build_rounds([round_(1, 4, 2, [1, 1, 0, 1]), round_(4, 4, 2, [1, 1, 0, 1])], 6, wall=1.0, length_stop=True)
    assert r.drafted == [0, 4, 1] and r.accepted == [0, 2, 1] and r.accepted_any == [0, 3, 1]
    assert r.emitted == [1, 3, 2]
    last = build_rounds([round_(1, 4, 0, [0, 1, 1, 0])], 2, wall=1.0, length_stop=True)  # one token left
    assert last.drafted == [0, 0] and last.accepted == [0, 0] and last.accepted_any == [0, 0]


def test_a_slurm_job_asks_for_the_gpus_its_verifier_is_sharded_over():
    from cactus_bench.sweep import gpus_per_job

    assert gpus_per_job([cfg_of("method=sps"), cfg_of("engine=vllm", "pair.tensor_parallel_size=4")]) == 4
    assert gpus_per_job([cfg_of("method=sps")]) == 1
