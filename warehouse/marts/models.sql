-- marts.models: the models the latest run planned for, one row each, with what capacity depends on.
-- grain: one row per model (its current registry revision).
-- columns: run_id, run_date, model, revision, config_sha256, model_family, model_type,
--   architecture, is_generic, num_layers, hidden_size, num_attention_heads, num_kv_heads, head_dim,
--   vocab_size, intermediate_size, num_experts, num_experts_per_token, max_position_embeddings,
--   context_limit_tokens, torch_dtype, quant_method, quant_format, total_params, active_params,
--   kv_elements_per_token, checkpoint_bytes, published_parameters, gated, source, registered_at
-- history: marts.models_history (every retained run).
create or replace view marts.models as
with models as (
    select * from staging.models
)

select
    run_id,
    run_date,
    model,
    revision,
    config_sha256,
    model_family,
    model_type,
    architecture,
    is_generic,
    num_layers,
    hidden_size,
    num_attention_heads,
    num_kv_heads,
    head_dim,
    vocab_size,
    intermediate_size,
    num_experts,
    num_experts_per_token,
    max_position_embeddings,
    context_limit_tokens,
    torch_dtype,
    quant_method,
    quant_format,
    total_params,
    active_params,
    kv_elements_per_token,
    checkpoint_bytes,
    published_parameters,
    gated,
    source,
    registered_at
from models;

comment on view marts.models is 'Models planned by the latest nightly run (current registry revision of each).';
comment on column marts.models.model is 'Hugging Face repo id, e.g. meta-llama/Llama-3.1-8B-Instruct.';
comment on column marts.models.revision is 'Hub revision (commit) of the config, when known.';
comment on column marts.models.config_sha256 is 'sha256 of the config.json bytes; a new value is a new revision.';
comment on column marts.models.model_family is 'Model family (llama, qwen3, deepseek_v3...).';
comment on column marts.models.model_type is 'config.json model_type.';
comment on column marts.models.architecture is 'config.json architectures[0].';
comment on column marts.models.is_generic is 'True when parsed by the generic path (model_type not recognized).';
comment on column marts.models.num_layers is 'Decoder layers.';
comment on column marts.models.hidden_size is 'Hidden size.';
comment on column marts.models.num_attention_heads is 'Query heads H.';
comment on column marts.models.num_kv_heads is 'KV heads H_kv of full-attention layers (1 for MQA).';
comment on column marts.models.head_dim is 'Head dimension D_h.';
comment on column marts.models.vocab_size is 'Vocabulary size.';
comment on column marts.models.intermediate_size is 'Dense MLP intermediate size.';
comment on column marts.models.num_experts is 'Routed experts per MoE layer (0 for dense models).';
comment on column marts.models.num_experts_per_token is 'Experts each token is routed to.';
comment on column marts.models.max_position_embeddings is 'config.json max_position_embeddings.';
comment on column marts.models.context_limit_tokens is 'Longest context the model supports (rope scaling included); the grid''s last context.';
comment on column marts.models.torch_dtype is 'Dtype the checkpoint is served in by default.';
comment on column marts.models.quant_method is 'quantization_config.quant_method of the checkpoint, if quantized.';
comment on column marts.models.quant_format is 'Weight format of a quantized checkpoint (fp8, int8, int4, mxfp4).';
comment on column marts.models.total_params is 'Parameters counted from the config.';
comment on column marts.models.active_params is 'Parameters touched per token (MoE: routed experts in use only).';
comment on column marts.models.kv_elements_per_token is 'KV elements cached per token over all layers (before dtype and TP).';
comment on column marts.models.checkpoint_bytes is 'Checkpoint size from model.safetensors.index.json, when known (bytes).';
comment on column marts.models.published_parameters is 'Parameter count the publisher states, when known.';
comment on column marts.models.gated is 'True when the Hub repo is gated (needs HF_TOKEN to fetch).';
comment on column marts.models.source is 'Where the registry got the config: bundled, local, hf-cache, hub.';
comment on column marts.models.registered_at is 'When the registry first stored this revision (UTC).';
