-- staging.gpus: registry GPU SKUs in the warehouse's vocabulary (slug -> gpu), typed.
-- grain: one row per GPU SKU.
-- columns: run_id, run_date, gpu, gpu_name, vendor, architecture, form_factor, memory_marketing_gb,
--   memory_type, memory_total_mib_smi, memory_total_bytes, memory_total_basis,
--   memory_bandwidth_gbps, bf16_dense_tflops, fp8_dense_tflops, fp4_dense_tflops, fp8_support,
--   fp4_support, int8_support, interconnect, interconnect_gbps, gpus_per_node,
--   price_usd_per_gpu_hour, price_source, price_date, price_basis, price_provider, price_region,
--   price_commitment, max_gpus_available, aliases, sources, content_sha256
create or replace view staging.gpus as
with source as (
    select * from raw.gpus
),

renamed as (
    select
        run.run_id,
        run.run_date,
        slug::varchar as gpu,
        name::varchar as gpu_name,
        vendor::varchar as vendor,
        architecture::varchar as architecture,
        form_factor::varchar as form_factor,
        memory_marketing_gb::double as memory_marketing_gb,
        memory_type::varchar as memory_type,
        memory_total_mib_smi::bigint as memory_total_mib_smi,
        memory_total_bytes::bigint as memory_total_bytes,
        memory_total_basis::varchar as memory_total_basis,
        memory_bandwidth_gbps::double as memory_bandwidth_gbps,
        bf16_dense_tflops::double as bf16_dense_tflops,
        fp8_dense_tflops::double as fp8_dense_tflops,
        fp4_dense_tflops::double as fp4_dense_tflops,
        fp8_support::boolean as fp8_support,
        fp4_support::boolean as fp4_support,
        int8_support::boolean as int8_support,
        interconnect::varchar as interconnect,
        interconnect_gbps::double as interconnect_gbps,
        gpus_per_node::bigint as gpus_per_node,
        price_usd_per_gpu_hour::double as price_usd_per_gpu_hour,
        price_source::varchar as price_source,
        price_date::date as price_date,
        price_basis::varchar as price_basis,
        price_provider::varchar as price_provider,
        price_region::varchar as price_region,
        price_commitment::varchar as price_commitment,
        max_gpus_available::bigint as max_gpus_available,
        aliases::json::varchar[] as aliases,
        sources::json::varchar[] as sources,
        content_sha256::varchar as content_sha256
    from source
    cross join raw.run as run
)

select * from renamed;
