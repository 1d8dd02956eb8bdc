"""config.json (a plain dict) -> ModelSpec, for every model family a serving fleet runs.

Pure: no I/O. Errors are `ConfigError` with a one-line reason; any KeyError/TypeError/... that
malformed input provokes inside the parser is turned into a ConfigError as well.

How a config becomes a model
----------------------------
* **Nesting.** Multimodal wrappers (Gemma 3, Llama 4, Mistral 3, Qwen-VL...) keep the language
  model under `text_config`; that is what is parsed. Wrapper-level keys (`quantization_config`,
  `torch_dtype`, `tie_word_embeddings` where the text config lacks it) are read from the outer dict.
  The vision tower (and projector) goes into `extra_params` where the parser knows its structure
  (Llama 4, Gemma 3 SigLIP, Mistral 3 Pixtral, Qwen3.5); otherwise a note says it is not counted.
* **Layers.** `ModelSpec.layers` holds one `LayerKVSpec` per decoder layer that has a token mixer
  (attention, MLA, Mamba, gated delta-net), with `index` = the decoder layer index and `cache` an
  instance of its kind's class (`capacity.kv.kinds`: `FullAttention`, `SlidingWindowAttention`,
  `ChunkedLocalAttention`, `LatentAttention`, `RecurrentState`, `SharedKV`). Nemotron-H's
  MLP-only and MoE-only layers (`-` and `E` in `hybrid_override_pattern`) cache nothing and have
  no `LayerKVSpec`; for every other family `len(layers) == num_layers`. `layer_params` always has
  one entry per decoder layer (`num_layers`).
* **Windows.** Per-layer kinds follow each family's transformers rule (each family's `default_kinds`):
  Mistral/Mixtral/Phi-3 `sliding_window` on every layer; Qwen2/Qwen3 only with
  `use_sliding_window`, on layers with index >= `max_window_layers`; Gemma 2 / GPT-OSS even
  layers sliding; Gemma 3 full iff (i+1) % `sliding_window_pattern` == 0; Llama 4 chunked where
  `no_rope_layers[i]` is 1 (default: every 4th layer is full); any explicit `layer_types` wins.
* **KV sharing** (`num_kv_shared_layers`, Gemma 3n / Gemma 4, and the generic path): the last N
  layers are SHARED and read the last non-shared layer of the same attention type. Gemma 4 global
  layers take `global_head_dim` and, with `attention_k_eq_v`, `num_global_key_value_heads` (or
  `per_layer_config`, the form transformers 5 writes).
* **MLA** (`kv_lora_rank` set: DeepSeek-V2/V3/R1, Kimi-K2, GLM-4.7-Flash): one latent of
  `kv_lora_rank` + `qk_rope_head_dim` per token (`LatentAttention`; the registry stores it as one "head",
  K = rank, V = rope); the config's `head_dim` (= qk_rope_head_dim in DeepSeek configs) is never used for KV.
* **State layers** carry per-sequence element counts: Mamba-1 (Jamba) conv = I * d_conv,
  recurrent = I * d_state with I = expand * hidden; Mamba-2 (Nemotron-H) conv =
  (I + 2 * n_groups * d_state) * conv_kernel, recurrent = I * d_state with I = heads * head_dim;
  gated delta-net (Qwen3-Next, Qwen3.5) conv = (2 * Hk * Dk + Hv * Dv) * kernel, recurrent =
  Hv * Dk * Dv. The recurrent state is stored in `mamba_ssm_cache_dtype` (or `mamba_ssm_dtype`),
  float32 when the config says nothing.
* **Context limit** follows vLLM's `_get_and_verify_max_len`: the smallest of the length keys the
  config has (`max_position_embeddings`, `n_positions`, `max_seq_len`, `seq_length`,
  `model_max_length`, `max_sequence_length`, `max_seq_length`, `seq_len`); then, unless the model
  is Gemma 3, for rope types other than su/longrope/llama3 the length is multiplied by the rope
  `factor`, and for yarn the base becomes `original_max_position_embeddings` first.
  (vLLM additionally defaults LongRoPE models to `original_max_position_embeddings`; that is a
  default, not the limit, and is recorded in `notes`.)
* **Parameters** are counted per family from the structure transformers builds (biases, norms,
  q/k norms, sinks, MoE routers with their correction bias, shared experts); `extra_params`
  holds what is outside the decoder stack: MTP modules as the checkpoint stores them, vision
  towers, Gemma 4 per-layer embeddings. Checked exactly against transformers 5.24 instantiations
  (tests/test_oracle_transformers.py) and published safetensors totals (tests/test_param_counts.py).
* **Numbers** are read by one reader (`fields.read_int` / `read_number`, behind every `Fields`
  accessor and the registry's lint): a boolean is not an integer, NaN / infinities / negatives /
  absurd sizes are refused, and so is an integral float (`num_hidden_layers: 16.0`), because
  transformers 5's config classes refuse it (strict integer fields; vLLM and SGLang load configs
  through them). `fields.check_shape` bounds nesting (32 levels) and size (250,000 keys and values)
  first, without recursion; fp8 `weight_block_size` must be two positive integers (vLLM's rule).
* **Published configs omit fields** transformers fills from its class defaults (Gemma 3's
  text_config has no vocab_size): those defaults are applied and listed in `notes`.

Layout
------
`parse.parse_config` is the one entry point. `registry.select` chooses a family object from the
config's `model_type` (the only place a family name is compared); the family (`family.Family` and
its subclasses in `dense`, `gemma`, `moe`, `mla`, `hybrid`) answers how its config spells the
dimensions, which mixer each layer has, and what each layer holds. `context`, `quantization` and
`vision` read what is common to every family.
"""

from capacity.hf_config.fields import ConfigError
from capacity.hf_config.parse import parse_config
from capacity.hf_config.quantization import checkpoint_size_band, checkpoint_size_problem

__all__ = ["ConfigError", "checkpoint_size_band", "checkpoint_size_problem", "parse_config"]
