-- raw.gpus: every GPU SKU in the registry, as the nightly run read it.
-- grain: one row per SKU (slug, the catalog id).
-- columns: the registry's `gpu_skus` table (slug, name, vendor, architecture, form_factor, memory
--   sizes and basis, bandwidth, dense TFLOPS, dtype support, interconnect, gpus_per_node, price
--   with source and date, sources, content_sha256, created_at, updated_at) and aliases (JSON list).
-- written by: the `gpu_catalog` asset, from the frame registered as `incoming`.
create or replace table raw.gpus as
select * from incoming;

comment on table raw.gpus is 'GPU SKUs copied from the registry database (synced from the GPU catalog).';
