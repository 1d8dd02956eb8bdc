-- staging.models: registry models in the warehouse's vocabulary (repo_id -> model), typed.
-- grain: one row per model (its current registry revision).
-- columns: run_id, run_date, model, revision, config_sha256, model_family, model_type,
--   architecture, is_generic, hidden_size, num_layers, num_attention_heads, num_kv_heads, head_dim,
--   vocab_size, intermediate_size, max_position_embeddings, context_limit_tokens, torch_dtype,
--   tie_word_embeddings, quant_method, quant_format, total_params, active_params, embedding_params,
--   num_experts, num_experts_per_token, kv_elements_per_token, checkpoint_bytes,
--   published_parameters, gated, source, registered_at
create or replace view staging.models as
with source as (
    select * from raw.models
),

renamed as (
    select
        run.run_id,
        run.run_date,
        repo_id::varchar as model,
        revision::varchar as revision,
        config_sha256::varchar as config_sha256,
        family::varchar as model_family,
        model_type::varchar as model_type,
        architecture::varchar as architecture,
        is_generic::boolean as is_generic,
        hidden_size::bigint as hidden_size,
        num_layers::bigint as num_layers,
        num_attention_heads::bigint as num_attention_heads,
        num_kv_heads::bigint as num_kv_heads,
        head_dim::bigint as head_dim,
        vocab_size::bigint as vocab_size,
        intermediate_size::bigint as intermediate_size,
        max_position_embeddings::bigint as max_position_embeddings,
        context_limit_tokens::bigint as context_limit_tokens,
        torch_dtype::varchar as torch_dtype,
        tie_word_embeddings::boolean as tie_word_embeddings,
        quant_method::varchar as quant_method,
        quant_format::varchar as quant_format,
        total_params::bigint as total_params,
        active_params::bigint as active_params,
        embedding_params::bigint as embedding_params,
        num_experts::bigint as num_experts,
        num_experts_per_token::bigint as num_experts_per_token,
        kv_elements_per_token::bigint as kv_elements_per_token,
        checkpoint_bytes::bigint as checkpoint_bytes,
        published_parameters::bigint as published_parameters,
        gated::boolean as gated,
        source::varchar as source,
        created_at::timestamptz as registered_at
    from source
    cross join raw.run as run
)

select * from renamed;
