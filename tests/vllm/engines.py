"""The vLLM tier's engines and requests (`conftest.py` has its fixtures): the settings every test's engine
is started with (one engine of each kind per worker: start-up is most of the tier's time), and decoding
through an engine directly."""

from vllm import SamplingParams
from vllm.inputs import TokensPrompt

from cactus_bench.adapters.embedded import resolve_model
from cactus_bench.app import config
from cactus_bench.app.compose import compose
from cactus_bench.backends.vllm import decoder as vdecoder
from cactus_bench.backends.vllm import plugin

# one engine of each kind serves every test (engine start-up is most of this tier's time)
BASE = (
    "pair=smollm2",
    "engine=vllm",
    "engine.name=eager",
    "m=4",
    "batch_size=128",  # a law test's 128 requests in one step
    "engine.settings.kv_cache_gib=0.5",
    "engine.settings.max_model_len=1024",
    "progress=false",
)
HF_BASE = ("pair=smollm2", "engine=eager", "m=4", "batch_size=8", "progress=false")  # the transformers backend
SELF = "pair.drafter=embedded:smollm2/verifier"  # the verifier as its own drafter: p = q
PROMPT = "Q: What is 7 times 8?\nA:"  # drafter and verifier disagree here: a broken residual shows
SAMPLED = SamplingParams(temperature=1.0, top_k=20, top_p=1.0, max_tokens=2)  # the prefill's token, one decision


def llm(*overrides):
    """The backend's engine for these overrides (started once, shared with the app's runs of them)."""
    cfg = compose((*BASE, *overrides))
    spec = config.validate(cfg)
    models = spec.loading(lambda n: resolve_model(n, log=lambda s: None))
    return vdecoder.engine(models, spec.decode, models.drafter)


def decode(engine, prompt_ids, n, rule, params=SAMPLED, seed0=0, warp="verifier"):
    """n decodes of one prompt, request i seeded seed0 + i; `rule` None: vLLM's own acceptance step (with
    this project's seeded drafter)."""
    tags = [f"t{seed0 + i}" for i in range(n)]
    sampling = [params.clone() for _ in range(n)]
    for i, s in enumerate(sampling):
        s.seed = seed0 + i
        s.extra_args = plugin.request_settings(rule, {}, warp, tags[i])
    outs = engine.generate([TokensPrompt(prompt_token_ids=prompt_ids)] * n, sampling, use_tqdm=False)
    rounds = engine.collective_rpc(plugin.take_rounds, args=(tags,))[0]
    return [tuple(o.outputs[0].token_ids) for o in outs], [rounds[t] for t in tags]
