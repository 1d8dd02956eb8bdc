"""Calibration: capplan's predicted memory terms against what serving engines measured.

Pure functions, no I/O. The flow:

1. `observed_deployment` turns the settings a startup log / metrics export reports into the
   `DeploymentSpec` capplan predicts for (shared with the public-log accuracy set,
   `evaluation.measurements`).
2. Each observed deployment with its prediction is an `Observation`: per term, measured and
   predicted bytes per GPU. `residual` gives the correction that would have made the prediction
   right: a ratio `measured / predicted` for terms that scale with the model (weights, the
   profiling pass's activation peak, the KV pool), a difference in bytes for non-torch memory
   (CUDA context, NCCL buffers: a constant per engine and GPU, not a share of the model).
3. `fit_calibration` groups observations by scope, from specific to general (`LEVELS`: engine
   version series x GPU x model family, ... , engine profile), and fits each term's correction as
   the median with an error band (MAD and a percentile-bootstrap interval of the median). A scope
   is `usable` from `min_observations` deployments on (default 3).
4. `CalibrationFit.lookup` picks, for any deployment, the most specific usable scope;
   `Correction.kv_budget` applies it to a prediction (KV budget = usable memory - corrected
   weights - corrected activation - corrected non-torch - CUDA graphs where the engine deducts
   them), and `calibrated_pool` resizes the engine's KV pool to that budget with the engine's own
   block arithmetic, so B_max, max context and KV tokens follow from `capacity.pool` unchanged.

`leave_one_out` gives, per deployment, the calibrated KV pool predicted *without* that deployment
in the fit: the honest error of calibrated predictions (an in-sample fit would flatter itself).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from capacity import engine_constants as ec
from capacity import numeric
from capacity.engines import Engine, registry
from capacity.engines.vllm.profile import VllmProfile
from capacity.estimate import Estimate
from capacity.features.lora import LoraSpec
from capacity.features.offload import UnsizedConnector, WeightOffload
from capacity.features.parallel_layout import attention_dp_ranks, expert_parallel_width
from capacity.features.speculative import SpecMethod, SpeculativeSpec, from_sglang_flags, from_vllm_config
from capacity.numeric import Num
from capacity.pool import ChargeTerms, KVPool, PoolUnit, b_max, max_concurrency, max_context
from capacity.spec import DeploymentSpec, ModelSpec

DEFAULT_MIN_OBSERVATIONS = 3
DEFAULT_CONFIDENCE = 0.9
DEFAULT_RESAMPLES = 1000

RATIO = "ratio"  # correction = measured / predicted, applied as predicted * correction
DELTA = "delta_bytes"  # correction = measured - predicted, applied as predicted + correction
TERMS = ("weights", "activation_peak", "non_torch", "kv_pool")
TERM_KIND = {"weights": RATIO, "activation_peak": RATIO, "non_torch": DELTA, "kv_pool": RATIO}
# the KV pool after calibration, leave-one-out: measured / calibrated (the band of calibrated limits)
CALIBRATED_TERM = "kv_pool_calibrated"
ALL_TERMS = (*TERMS, CALIBRATED_TERM)
# How fast: measured / predicted of the performance model's TPOT, TTFT and output tokens/s (ratios
# that say how far capacity.performance's fitted efficiencies are off for a scope; reported, not
# applied to the memory terms, and never counted towards a memory scope's observations)
SPEED_TERMS = ("tpot", "ttft", "output_throughput")
IDENTITY = {RATIO: 1.0, DELTA: 0.0}


# --- what a log or an export says -> what capplan predicts for ------------------------------------


@dataclass(frozen=True, slots=True)
class ObservedSettings:
    """The serving settings a startup log, a metrics scrape or an export reports (None = not said)."""

    tp: int = 1
    pp: int = 1
    dtype: str | None = None  # activation / weight dtype as the engine printed it: bfloat16, float16...
    quantization: str | None = None  # fp8, awq_marlin, compressed-tensors... (None: unquantized)
    kv_cache_dtype: str | None = None  # auto, fp8, fp8_e4m3...
    engine: str = Engine.VLLM
    engine_version: str | None = None
    engine_generation: str | None = None  # v0 | v1, when only that is known
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    total_gpu_memory_bytes: int | None = None  # what the engine saw as the device total
    enforce_eager: bool | None = None  # --enforce-eager: no CUDA graphs
    triton_kernels: bool | None = None  # the optional package ran (vLLM 0.10.2-0.11.x MXFP4 on Hopper)
    disable_custom_all_reduce: bool | None = None  # vLLM --disable-custom-all-reduce
    gpu_peer_access: bool | None = None  # False: vLLM said the P2P test failed
    unmodelled_features: tuple[
        str, ...
    ] = ()  # lora (sized at the engine's defaults) | speculative | cpu_offload | dp_attention | kv_connector
    other_process_bytes: int | None = None  # in use on the GPU when the engine started (total - free, as printed)
    dp: int | None = None  # vLLM --data-parallel-size; SGLang --dp-size (attention DP ranks with DP attention on)
    ep: int | None = None  # SGLang --ep-size (vLLM's --enable-expert-parallel: the feature `expert_parallel`)
    # speculative decoding as the log states it (telemetry/speculative_log.py's JSON in the engine's terms)
    speculative_config: str | None = None


_KV_DTYPES = {None: "auto", "auto": "auto", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_WEIGHT_DTYPES = {
    **dict.fromkeys(("bfloat16", "bf16"), "bf16"),
    **dict.fromkeys(("float16", "fp16", "half"), "fp16"),
    "float32": "float32",
    "auto": "auto",
}
_ONLINE_QUANT = {"fp8": "fp8"}  # --quantization X on an unquantized checkpoint -> weight dtype
# a telemetry row says only that CPU offload / a KV connector was on, not how much nor which: flagged, not sized
UNKNOWN_WEIGHT_OFFLOAD = WeightOffload(None)
UNKNOWN_CONNECTOR = UnsizedConnector(name="a KV connector of unknown kind")
# the settings a log states under DeploymentSpec's own names and meanings, taken as they are
_STATED_AS_DEPLOYED = (
    "tp",
    "pp",
    "gpu_memory_utilization",
    "max_model_len",
    "block_size",
    "max_num_batched_tokens",
    "max_num_seqs",
    "enforce_eager",
    "triton_kernels",
    "disable_custom_all_reduce",
    "gpu_peer_access",
)


def engine_version_for(version: str | None, generation: str | None) -> str:
    """A usable vLLM version: the stated one, else a representative release of the generation."""
    return VllmProfile.for_version(None).observed_version(version, generation) or "0.11"


def observed_deployment(model: ModelSpec, settings: ObservedSettings) -> DeploymentSpec:
    """The deployment a log describes, in capplan's terms (unknown settings left to the defaults).

    Weights: the checkpoint's own format (`auto`) unless the engine quantized a 16-bit checkpoint
    online (`--quantization fp8`) or served it in another 16/32-bit dtype. KV: as configured.
    """
    s = settings
    weight = "auto"
    quantization = (s.quantization or "").lower() or None
    if quantization in _ONLINE_QUANT and model.quantization is None:
        weight = _ONLINE_QUANT[quantization]
    elif s.dtype and quantization is None and model.quantization is None:
        weight = _WEIGHT_DTYPES.get(str(s.dtype).lower(), "auto")
        if weight in ("bf16", "fp16") and model.torch_dtype in ("bfloat16", "float16"):
            weight = "auto"
    kv_raw = (s.kv_cache_dtype or "").lower() or None
    kv = _KV_DTYPES.get(kv_raw, str(kv_raw))
    engine = Engine(str(s.engine or Engine.VLLM).lower())
    dp, ep = _observed_parallel(engine, model, s)
    version = registry.engine_profile(engine).observed_version(s.engine_version, s.engine_generation)
    return DeploymentSpec(
        **{name: getattr(s, name) for name in _STATED_AS_DEPLOYED},
        weight_dtype=weight,
        kv_dtype=kv,
        engine=engine,
        engine_version=version,
        # an observed engine ran at this length: accepted (its override set, or a length its config allows)
        allow_long_max_model_len=True,
        # a V0 log of a 0.8-0.10 release ran the V0 engine beside V1 (elsewhere the profile has none to pick)
        vllm_v0_engine=engine is Engine.VLLM and (s.engine_generation or "").lower() == "v0",
        gpu_memory_bytes=s.total_gpu_memory_bytes,
        lora=LoraSpec() if "lora" in s.unmodelled_features else None,  # the log's server: the engine's defaults
        speculative=_observed_speculative(model, s, engine),
        dp=dp,
        ep=ep,
        kv_offload=UNKNOWN_CONNECTOR if "kv_connector" in s.unmodelled_features else None,
        weight_offload=UNKNOWN_WEIGHT_OFFLOAD if "cpu_offload" in s.unmodelled_features else None,
        other_process_bytes=s.other_process_bytes or 0,
    )


def _observed_speculative(model: ModelSpec, s: ObservedSettings, engine: Engine) -> SpeculativeSpec | None:
    """The speculative decoding a log states, read as the engine reads its own settings (vLLM's
    SpeculativeConfig, SGLang's flags and their defaults for the target); where the log says it ran but not
    with what (or states what the engine would refuse), flagged and not sized."""
    if "speculative" not in s.unmodelled_features:
        return None
    try:
        stated = json.loads(s.speculative_config or "{}")
        if engine is Engine.SGLANG and stated.get("method"):
            spec = from_sglang_flags(
                str(stated["method"]),
                stated.get("model"),
                stated.get("num_speculative_tokens"),
                stated.get("eagle_topk"),
                stated.get("num_draft_tokens"),
                model.architecture,
            )
            # EAGLE with no draft path runs the target's MTP layers; a target without them had a draft the log
            # does not name (a dump cut short): not sized
            if spec.method is not SpecMethod.MTP or model.mtp_layers:
                return spec
        if engine is Engine.VLLM and stated:
            keys = {"method", "model", "num_speculative_tokens", "draft_tensor_parallel_size"}
            return from_vllm_config(json.dumps({k: v for k, v in stated.items() if k in keys}))
    except (ValueError, AttributeError):  # SpeculativeConfigError is a ValueError; JSON that is not an object
        pass
    return SpeculativeSpec(SpecMethod.UNKNOWN)


def _observed_parallel(engine: Engine, model: ModelSpec, s: ObservedSettings) -> tuple[int, int]:
    """(dp, ep) of the logged server, as the engine reads its args: the DP ranks with a pool each
    (`attention_dp_ranks`; an unset size is the engines' default 1); expert parallel over every MoE rank where
    switched on (vLLM --enable-expert-parallel, SGLang's --enable-ep-moe), else SGLang's --ep-size; on a model
    without routed experts the engines ignore it."""
    features = s.unmodelled_features
    dp = attention_dp_ranks(engine, s.dp or 1, "dp_attention" in features)
    if not model.num_experts:
        return dp, 1
    # the switch spans every MoE rank, as `capplan estimate --enable-expert-parallel` reads it
    return dp, expert_parallel_width(engine, s.tp, dp) if "expert_parallel" in features else (s.ep or 1)


def engine_series(engine: str, version: str | None) -> str | None:
    """'0.11.0' -> '0.11': releases of one minor series share their memory accounting."""
    if not version:
        return None
    try:
        parts = ec.parse_version(version)
    except ValueError:
        return version
    return ".".join(str(p) for p in parts[:2])


def engine_profile(engine: str, version: str | None) -> str:
    """The era of capplan's fitted overhead coefficients for this engine version (vLLM: the
    `overhead_profile` of the release, e.g. 'v1-mid'); other engines: the engine name."""
    base = registry.engine_profile(engine)
    return registry.engine_profile(engine, base.observed_version(version, None)).overhead_era


# --- one observed deployment next to its prediction ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observation:
    """Measured and predicted bytes per GPU of one observed deployment (None: not measured)."""

    deployment_id: str
    engine: str
    engine_version: str | None
    gpu: str | None
    model_family: str
    predicted: Mapping[str, int]  # TERMS -> bytes (kv_pool = the predicted KV budget)
    measured: Mapping[str, int | None]

    def residual(self, term: str) -> float | None:
        """The correction this deployment alone implies for `term` (None when not measured)."""
        measured = self.measured.get(term)
        predicted = self.predicted.get(term)
        if measured is None or predicted is None:
            return None
        if TERM_KIND[term] == DELTA:
            return float(measured - predicted)
        if predicted <= 0 or measured <= 0:
            return None
        return measured / predicted


@dataclass(frozen=True, slots=True)
class Band:
    """A term's correction: median, MAD (median absolute deviation, unscaled), and a percentile
    bootstrap interval of the median at `confidence`."""

    n: int
    median: float
    mad: float
    low: float
    high: float


def band(
    values: Sequence[float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: str = "",
) -> Band:
    """Robust summary of `values` (at least one). Deterministic: the bootstrap is seeded by `seed`, and the values
    are taken to 12 significant digits, since a ratio whose parts are float sums spread over threads can end an ulp
    apart from one run to the next (two equal ratios would otherwise give a MAD of float noise, a different one each
    run); measurements carry far fewer digits."""
    if not values:
        raise ValueError("band() needs at least one value")
    ordered = sorted(float(f"{v:.12g}") for v in values)
    median = statistics.median(ordered)
    mad = statistics.median(abs(v - median) for v in ordered)
    if len(ordered) == 1 or resamples <= 0:
        return Band(len(ordered), median, mad, median, median)
    rng = random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))
    n = len(ordered)
    medians = sorted(statistics.median(rng.choices(ordered, k=n)) for _ in range(resamples))
    tail = (1 - confidence) / 2
    low = medians[max(0, math.floor(tail * (resamples - 1)))]
    high = medians[min(resamples - 1, math.ceil((1 - tail) * (resamples - 1)))]
    return Band(n, median, mad, low, high)


# --- scopes ------------------------------------------------------------------------------------------

# From specific to general: the first usable scope of a deployment is the one applied.
LEVELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("engine_version_gpu_family", ("engine", "engine_version", "gpu", "model_family")),
    ("engine_version_gpu", ("engine", "engine_version", "gpu")),
    ("engine_version", ("engine", "engine_version")),
    ("engine_profile_gpu", ("engine", "engine_profile", "gpu")),
    ("engine_profile", ("engine", "engine_profile")),
)
_LEVEL_RANK = {name: i for i, (name, _fields) in enumerate(LEVELS)}


@dataclass(frozen=True, slots=True, order=True)
class ScopeKey:
    """One calibration scope: a level and the values of its fields (None: not part of the level).
    `engine_version` is the minor series ('0.11'), `engine_profile` the overhead era ('v1-mid')."""

    level: str
    engine: str
    engine_version: str | None = None
    engine_profile: str | None = None
    gpu: str | None = None
    model_family: str | None = None

    @property
    def rank(self) -> int:
        return _LEVEL_RANK.get(self.level, len(LEVELS))

    def label(self) -> str:
        parts = [f"{name}={value}" for name, value in self._values().items() if value is not None]
        return f"{self.level}(" + ", ".join(parts) + ")"

    def _values(self) -> dict[str, str | None]:
        return {
            "engine": self.engine,
            "engine_version": self.engine_version,
            "engine_profile": self.engine_profile,
            "gpu": self.gpu,
            "model_family": self.model_family,
        }


def scope_keys(
    engine: str,
    engine_version: str | None,
    gpu: str | None,
    model_family: str | None,
    levels: Iterable[str] | None = None,
) -> list[ScopeKey]:
    """The scopes a deployment belongs to, most specific first (levels whose fields it lacks are skipped)."""
    wanted = set(levels) if levels is not None else None
    values = {
        "engine": engine,
        "engine_version": engine_series(engine, engine_version),
        "engine_profile": engine_profile(engine, engine_version),
        "gpu": gpu,
        "model_family": model_family,
    }
    keys: list[ScopeKey] = []
    for name, fields in LEVELS:
        if wanted is not None and name not in wanted:
            continue
        if any(values[f] is None for f in fields):
            continue
        keys.append(ScopeKey(name, **{f: values[f] for f in fields}))  # type: ignore[arg-type]
    return keys


# --- corrections -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Correction:
    """The fitted corrections of one scope, ready to apply to a prediction."""

    scope: ScopeKey
    n_observations: int
    weights_ratio: float = 1.0
    activation_ratio: float = 1.0
    non_torch_delta_bytes: float = 0.0
    bands: Mapping[str, Band] = field(default_factory=dict)

    @classmethod
    def from_bands(cls, scope: ScopeKey, n_observations: int, bands: Mapping[str, Band]) -> Correction:
        def median(term: str) -> float:
            fitted = bands.get(term)
            return fitted.median if fitted is not None else IDENTITY[TERM_KIND[term]]

        return cls(
            scope=scope,
            n_observations=n_observations,
            weights_ratio=median("weights"),
            activation_ratio=median("activation_peak"),
            non_torch_delta_bytes=median("non_torch"),
            bands=dict(bands),
        )

    def overhead_delta_bytes(self, weights: Num, activation: Num, non_torch: Num) -> Num:
        """How many more bytes per GPU the corrected weights and overhead take than predicted
        (integers, or columns: the fleet-wide limits apply the same rule to every grid row)."""
        delta = (
            weights * (self.weights_ratio - 1) + activation * (self.activation_ratio - 1) + self.non_torch_delta_bytes
        )
        return numeric.ceil(delta)

    def kv_budget(self, predicted_budget: Num, weights: Num, activation: Num, non_torch: Num) -> Num:
        """The calibrated KV budget per GPU (the engine's budget minus the corrected terms' excess)."""
        return predicted_budget - self.overhead_delta_bytes(weights, activation, non_torch)

    def kv_budget_of(self, est: Estimate) -> int:
        return self.kv_budget(
            est.kv_budget_bytes_per_gpu,
            est.weights_bytes_per_gpu,
            est.activation_peak_bytes_per_gpu,
            est.non_torch_bytes_per_gpu,
        )


def resized_pool(pool: KVPool, old_budget: int, new_budget: int) -> KVPool:
    """The engine's KV pool rebuilt for another budget with the same layout: block and token
    pools take `budget // unit_bytes` units (what every engine profile does; the tightest stage
    has the largest unit), byte pools the budget itself; SGLang's hybrid SWA pool scales."""
    if new_budget <= 0:
        return replace(pool, capacity_units=0, swa_capacity_units=0 if pool.swa_capacity_units is not None else None)
    if pool.unit is PoolUnit.BYTE:
        return replace(pool, capacity_units=new_budget)
    if pool.swa_capacity_units is not None:
        if old_budget <= 0:
            return pool
        scale = new_budget / old_budget
        units = int(pool.capacity_units * scale)
        units -= units % max(pool.block_size, 1)
        return replace(pool, capacity_units=units, swa_capacity_units=int(pool.swa_capacity_units * scale))
    return replace(pool, capacity_units=resized_units(pool.capacity_units, pool.unit_bytes, new_budget))


def resized_units(units: Num, unit_bytes: Num, new_budget: Num) -> Num:
    """A block or token pool's units at another budget: `budget // unit_bytes`, none without a budget,
    unchanged where the pool has no unit size (integers, or columns for the fleet-wide limits)."""
    divided = new_budget // numeric.at_least(unit_bytes, 1)
    return numeric.choose(new_budget <= 0, 0, numeric.choose(unit_bytes <= 0, units, divided))


def pool_with_units(pool: KVPool, units: int) -> KVPool:
    """The same pool holding `units` blocks (e.g. the number a deployment reported)."""
    return replace(pool, capacity_units=max(0, units))


def calibrated_pool(est: Estimate, correction: Correction) -> KVPool:
    """The deployment's KV pool at the calibrated budget."""
    return resized_pool(est.pool, est.kv_budget_bytes_per_gpu, correction.kv_budget_of(est))


@dataclass(frozen=True, slots=True)
class PoolNumbers:
    """What a KV pool means for admission: sequences and tokens at the deployment's lengths."""

    num_blocks: int
    kv_tokens: int  # tokens the pool holds in sequences of max_model_len (max_concurrency(L) * L)
    b_max: int  # sequences of `context` tokens at once (engine max_num_seqs applied)
    max_context: dict[int, int]  # target concurrency -> largest context


@dataclass(frozen=True, slots=True)
class _TermsPool(KVPool):
    """A KVPool whose charge terms are computed once: the same rules (`KVPool.sequence_units`
    reads `charge_terms()`), without recomputing them on every step of a max-context search."""

    cached_terms: ChargeTerms | None = None

    def charge_terms(self) -> ChargeTerms:
        return self.cached_terms if self.cached_terms is not None else KVPool.charge_terms(self)


def with_cached_terms(pool: KVPool) -> KVPool:
    if isinstance(pool, _TermsPool) or pool.unit is PoolUnit.BYTE:
        return pool
    fields = {name: getattr(pool, name) for name in KVPool.__dataclass_fields__}
    return _TermsPool(**fields, cached_terms=pool.charge_terms())


def pool_numbers(
    pool: KVPool,
    *,
    context: int,
    max_model_len: int,
    max_num_seqs: int | None,
    concurrencies: Iterable[int] = (),
) -> PoolNumbers:
    if pool.capacity_units <= 0:
        return PoolNumbers(0, 0, 0, {b: 0 for b in concurrencies})
    pool = with_cached_terms(pool)
    tokens = int(max_concurrency(pool, max_model_len) * max_model_len)
    return PoolNumbers(
        num_blocks=pool.capacity_units,
        kv_tokens=tokens,
        b_max=b_max(pool, context, max_num_seqs, max_model_len),
        max_context={b: max_context(pool, b, max_model_len, max_num_seqs) for b in concurrencies},
    )


# --- the fit -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """One scope x term of the fit (the `calibration` mart's grain)."""

    scope: ScopeKey
    term: str
    correction_kind: str
    n_observations: int  # deployments in the scope with this term measured
    band: Band | None
    usable: bool  # n_observations >= min_observations
    deployments: tuple[str, ...]


@dataclass(frozen=True)
class CalibrationFit:
    rows: list[CalibrationRow]
    corrections: dict[ScopeKey, Correction]
    min_observations: int

    def lookup(
        self, engine: str, engine_version: str | None, gpu: str | None, model_family: str | None
    ) -> Correction | None:
        """The most specific scope of this deployment fitted on >= min_observations deployments."""
        for key in scope_keys(engine, engine_version, gpu, model_family):
            correction = self.corrections.get(key)
            if correction is not None and correction.n_observations >= self.min_observations:
                return correction
        return None


def _scoped(observations: Sequence[Observation]) -> dict[ScopeKey, list[Observation]]:
    groups: dict[ScopeKey, list[Observation]] = {}
    for obs in observations:
        for key in scope_keys(obs.engine, obs.engine_version, obs.gpu, obs.model_family):
            groups.setdefault(key, []).append(obs)
    return groups


def _corrections(
    groups: Mapping[ScopeKey, Sequence[Observation]], confidence: float, resamples: int
) -> tuple[dict[ScopeKey, Correction], dict[ScopeKey, dict[str, tuple[Band, tuple[str, ...]]]]]:
    corrections: dict[ScopeKey, Correction] = {}
    fitted: dict[ScopeKey, dict[str, tuple[Band, tuple[str, ...]]]] = {}
    for key, members in groups.items():
        bands: dict[str, tuple[Band, tuple[str, ...]]] = {}
        for term in TERMS:
            pairs = [(obs.deployment_id, r) for obs in members if (r := obs.residual(term)) is not None]
            if pairs:
                values = [r for _d, r in pairs]
                bands[term] = (
                    band(values, confidence=confidence, resamples=resamples, seed=f"{key.label()}:{term}"),
                    tuple(d for d, _r in pairs),
                )
        if not bands:
            continue
        measured = {d for _term, (_b, ds) in bands.items() for d in ds}
        fitted[key] = bands
        corrections[key] = Correction.from_bands(key, len(measured), {t: b for t, (b, _ds) in bands.items()})
    return corrections, fitted


def calibrated_kv_pool(obs: Observation, correction: Correction) -> int:
    """The observation's KV pool as the correction predicts it."""
    return correction.kv_budget(
        obs.predicted["kv_pool"], obs.predicted["weights"], obs.predicted["activation_peak"], obs.predicted["non_torch"]
    )


def fit_calibration(
    observations: Sequence[Observation],
    *,
    min_observations: int = DEFAULT_MIN_OBSERVATIONS,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
) -> CalibrationFit:
    """Every scope's corrections, with the leave-one-out error of the calibrated KV pool per scope."""
    if min_observations < 1:
        raise ValueError(f"min_observations must be >= 1, got {min_observations}")
    groups = _scoped(observations)
    corrections, fitted = _corrections(groups, confidence, resamples)
    rows: list[CalibrationRow] = []
    for key in sorted(fitted, key=lambda k: (k.rank, k)):
        n = corrections[key].n_observations
        for term in TERMS:
            entry = fitted[key].get(term)
            if entry is None:
                continue
            fitted_band, deployments = entry
            rows.append(
                CalibrationRow(
                    key, term, TERM_KIND[term], fitted_band.n, fitted_band, n >= min_observations, deployments
                )
            )
        # measured / calibrated without the deployment itself in the fit
        ratios: list[tuple[str, float]] = []
        members = groups[key]
        for obs in members:
            measured = obs.measured.get("kv_pool")
            if not measured:
                continue
            others = [o for o in members if o.deployment_id != obs.deployment_id]
            loo = _corrections({key: others}, confidence, resamples=0)[0].get(key) if others else None
            if loo is None:
                continue
            predicted = calibrated_kv_pool(obs, loo)
            if predicted > 0:
                ratios.append((obs.deployment_id, measured / predicted))
        if ratios:
            values = [r for _d, r in ratios]
            rows.append(
                CalibrationRow(
                    key,
                    CALIBRATED_TERM,
                    RATIO,
                    len(values),
                    band(values, confidence=confidence, resamples=resamples, seed=f"{key.label()}:{CALIBRATED_TERM}"),
                    n >= min_observations,
                    tuple(d for d, _r in ratios),
                )
            )
    return CalibrationFit(rows, corrections, min_observations)


@dataclass(frozen=True, slots=True)
class SpeedObservation:
    """Measured / predicted speed of one observed deployment, per SPEED_TERMS (None: not measured)."""

    deployment_id: str
    engine: str
    engine_version: str | None
    gpu: str | None
    model_family: str
    ratios: Mapping[str, float | None]


def fit_speed(
    observations: Sequence[SpeedObservation],
    *,
    min_observations: int = DEFAULT_MIN_OBSERVATIONS,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
) -> list[tuple[CalibrationRow, int]]:
    """Per scope and speed term: the median measured / predicted ratio with its band, and the
    deployments in the scope that measured any speed term (what `usable` is judged on)."""
    groups: dict[ScopeKey, list[SpeedObservation]] = {}
    for obs in observations:
        for key in scope_keys(obs.engine, obs.engine_version, obs.gpu, obs.model_family):
            groups.setdefault(key, []).append(obs)
    rows: list[tuple[CalibrationRow, int]] = []
    for key in sorted(groups, key=lambda k: (k.rank, k)):
        members = groups[key]
        measured = {o.deployment_id for o in members if any(v is not None for v in o.ratios.values())}
        for term in SPEED_TERMS:
            pairs = [(o.deployment_id, r) for o in members if (r := o.ratios.get(term)) is not None and r > 0]
            if not pairs:
                continue
            fitted = band(
                [r for _d, r in pairs], confidence=confidence, resamples=resamples, seed=f"{key.label()}:{term}"
            )
            row = CalibrationRow(
                key, term, RATIO, len(pairs), fitted, len(measured) >= min_observations, tuple(d for d, _r in pairs)
            )
            rows.append((row, len(measured)))
    return rows


@dataclass(frozen=True, slots=True)
class DeploymentCalibration:
    """The correction applied to one observed deployment, and its honest (leave-one-out) pool."""

    deployment_id: str
    correction: Correction | None  # from the fit on every deployment (what limits and budgets use)
    loo_correction: Correction | None  # the same lookup in a fit without this deployment
    loo_kv_pool: int | None  # the deployment's KV pool predicted by loo_correction


def leave_one_out(
    observations: Sequence[Observation],
    fit: CalibrationFit,
    *,
    refit: Callable[[Sequence[Observation]], CalibrationFit] | None = None,
) -> list[DeploymentCalibration]:
    """Per observation: the correction the full fit applies, and the KV pool a fit without it predicts."""
    make = refit or (lambda obs: fit_calibration(obs, min_observations=fit.min_observations, resamples=0))
    results: list[DeploymentCalibration] = []
    for obs in observations:
        applied = fit.lookup(obs.engine, obs.engine_version, obs.gpu, obs.model_family)
        others = [o for o in observations if o.deployment_id != obs.deployment_id]
        loo = make(others).lookup(obs.engine, obs.engine_version, obs.gpu, obs.model_family) if others else None
        pool = calibrated_kv_pool(obs, loo) if loo is not None else None
        results.append(DeploymentCalibration(obs.deployment_id, applied, loo, pool))
    return results
