-- staging.ingest_errors: every item this run rejected, from the three places that can reject one.
-- grain: one row per rejected item and stage.
-- columns: run_id, run_date, source, ingest_run_id, item_kind, item_key, stage, reason,
--   source_path, raw_excerpt
-- source: registry_models | gpu_catalog | capacity_grid
create or replace view staging.ingest_errors as
with model_errors as (
    select 'registry_models' as source, * from raw.model_ingest_errors
),

gpu_errors as (
    select 'gpu_catalog' as source, * from raw.gpu_ingest_errors
),

grid_errors as (
    select 'capacity_grid' as source, * from raw.grid_errors
),

unioned as (
    select * from model_errors
    union all by name
    select * from gpu_errors
    union all by name
    select * from grid_errors
)

select
    run.run_id,
    run.run_date,
    unioned.source::varchar as source,
    unioned.ingest_run_id::bigint as ingest_run_id,
    unioned.item_kind::varchar as item_kind,
    unioned.item_key::varchar as item_key,
    unioned.stage::varchar as stage,
    unioned.reason::varchar as reason,
    unioned.source_path::varchar as source_path,
    unioned.raw_excerpt::varchar as raw_excerpt
from unioned
cross join raw.run as run;
