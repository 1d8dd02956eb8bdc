-- raw.procurement_plan: the fleet's procurement plan: GPUs to buy per SKU to serve every workload (capacity.placement.plan_procurement).
-- grain: one GPU SKU bought.
-- columns: gpu, gpu_name, gpus_used, gpus_bought, nodes, spare_gpus, usd_per_gpu_hour,
--   usd_per_hour, workloads, fleet_gpus, fleet_usd_per_hour, method, optimal, whole_nodes,
--   unserved, notes
-- written by: the `recommendations` asset, from the frame registered as `incoming`.
create or replace table raw.procurement_plan as
select * from incoming;

comment on table raw.procurement_plan is 'The fleet''s procurement plan: GPUs to buy per SKU to serve every workload (capacity.placement.plan_procurement).';
