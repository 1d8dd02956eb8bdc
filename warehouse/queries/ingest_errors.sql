-- What the latest run rejected, and why.
select source, item_kind, item_key, stage, reason
from marts.ingest_errors
order by source, item_key;
