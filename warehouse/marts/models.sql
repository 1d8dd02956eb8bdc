-- marts.models: the models the latest run planned for, one row each, with what capacity depends on.
-- grain: one row per model (its current registry revision).
-- columns: run_id, run_date, model, revision, config_sha256, model_family, model_type,
--   architecture, is_generic, num_layers, hidden_size, num_attention_heads, num_kv_heads, head_dim,
--   vocab_size, intermediate_size, num_experts, num_experts_per_token, max_position_embeddings,
--   context_limit_tokens, torch_dtype, quant_method, quant_format, total_params, active_params,
--   kv_elements_per_token, checkpoint_bytes, published_parameters, gated, source, registered_at
-- history: marts.models_history (every retained run).
-- column comments: models.yaml beside this file; the columns the marts share, capacity/columns.py.
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
