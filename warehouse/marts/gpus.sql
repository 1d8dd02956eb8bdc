-- marts.gpus: the GPU SKUs the latest run planned for.
-- grain: one row per GPU SKU.
-- columns: run_id, run_date, gpu, gpu_name, vendor, architecture, form_factor, memory_total_bytes,
--   memory_total_gib, memory_total_basis, memory_marketing_gb, memory_type, memory_bandwidth_gbps,
--   bf16_dense_tflops, fp8_dense_tflops, fp4_dense_tflops, fp8_support, fp4_support, int8_support,
--   interconnect, interconnect_gbps, gpus_per_node, price_usd_per_gpu_hour, price_source,
--   price_date, price_basis, price_provider, price_region, price_commitment, max_gpus_available,
--   aliases
-- history: marts.gpus_history (every retained run).
-- column comments: gpus.yaml beside this file; the columns the marts share, capacity/columns.py.
create or replace view marts.gpus as
with gpus as (
    select * from staging.gpus
)

select
    run_id,
    run_date,
    gpu,
    gpu_name,
    vendor,
    architecture,
    form_factor,
    memory_total_bytes,
    round(memory_total_bytes / 1073741824.0, 2) as memory_total_gib,
    memory_total_basis,
    memory_marketing_gb,
    memory_type,
    memory_bandwidth_gbps,
    bf16_dense_tflops,
    fp8_dense_tflops,
    fp4_dense_tflops,
    fp8_support,
    fp4_support,
    int8_support,
    interconnect,
    interconnect_gbps,
    gpus_per_node,
    price_usd_per_gpu_hour,
    price_source,
    price_date,
    price_basis,
    price_provider,
    price_region,
    price_commitment,
    max_gpus_available,
    aliases
from gpus;

comment on view marts.gpus is 'GPU SKUs planned by the latest nightly run.';
