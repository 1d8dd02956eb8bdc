-- What changed in the grid since the previous run, and why: changed rows per cause, the largest move of each.
select cause, count(*) as changed_rows, round(max(change_pct), 1) as largest_change_pct
from marts.grid_diff
group by cause
order by changed_rows desc, cause;
