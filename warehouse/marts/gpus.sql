-- marts.gpus: the GPU SKUs the latest run planned for.
-- grain: one row per GPU SKU.
-- columns: run_id, run_date, gpu, gpu_name, vendor, architecture, form_factor, memory_total_bytes,
--   memory_total_gib, memory_total_basis, memory_marketing_gb, memory_type, memory_bandwidth_gbps,
--   bf16_dense_tflops, fp8_dense_tflops, fp4_dense_tflops, fp8_support, fp4_support, int8_support,
--   interconnect, interconnect_gbps, gpus_per_node, price_usd_per_gpu_hour, price_source,
--   price_date, price_basis, price_provider, price_region, price_commitment, max_gpus_available,
--   aliases
-- history: marts.gpus_history (every retained run).
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
comment on column marts.gpus.gpu is 'Catalog id of the SKU, e.g. h100-sxm-80gb (the gpu column of every mart).';
comment on column marts.gpus.gpu_name is 'Product name.';
comment on column marts.gpus.vendor is 'nvidia, amd, intel...';
comment on column marts.gpus.architecture is 'GPU architecture (hopper, blackwell, cdna3...).';
comment on column marts.gpus.form_factor is 'SXM, PCIe, OAM, NVL...';
comment on column marts.gpus.memory_total_bytes is 'Device memory as the driver reports it to the engine (bytes), not the marketing number.';
comment on column marts.gpus.memory_total_gib is 'memory_total_bytes in GiB, rounded to 0.01.';
comment on column marts.gpus.memory_total_basis is 'How memory_total_bytes was obtained (measured nvidia-smi value, or derived).';
comment on column marts.gpus.memory_marketing_gb is 'Memory as marketed (GB).';
comment on column marts.gpus.memory_type is 'HBM3, HBM3e, GDDR6...';
comment on column marts.gpus.memory_bandwidth_gbps is 'Memory bandwidth (GB/s).';
comment on column marts.gpus.bf16_dense_tflops is 'Dense BF16 TFLOPS.';
comment on column marts.gpus.fp8_dense_tflops is 'Dense FP8 TFLOPS (null when unsupported).';
comment on column marts.gpus.fp4_dense_tflops is 'Dense FP4 TFLOPS (null when unsupported).';
comment on column marts.gpus.fp8_support is 'True when the SKU has FP8 tensor cores (fp8 weights/KV in the grid).';
comment on column marts.gpus.fp4_support is 'True when the SKU has FP4 tensor cores.';
comment on column marts.gpus.int8_support is 'True when the SKU runs int8 kernels.';
comment on column marts.gpus.interconnect is 'GPU interconnect (NVLink 4, PCIe 5, Infinity Fabric...).';
comment on column marts.gpus.interconnect_gbps is 'Interconnect bandwidth per GPU (GB/s).';
comment on column marts.gpus.gpus_per_node is 'GPUs per node: the largest tensor-parallel size the grid uses.';
comment on column marts.gpus.price_usd_per_gpu_hour is 'USD per GPU-hour the planner uses: the catalog''s price or, with a user catalog, the offer its price_policy chose (see the price_* columns).';
comment on column marts.gpus.price_source is 'Where the price comes from.';
comment on column marts.gpus.max_gpus_available is 'GPUs obtainable at that price (the offer''s max_gpus): procurement buys at most this many; null when not known.';
comment on column marts.gpus.aliases is 'Other names of the SKU (nvidia-smi and DCGM product names included).';
