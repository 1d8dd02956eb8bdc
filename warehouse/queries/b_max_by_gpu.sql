-- How many concurrent 32k-token sequences can Llama-3.1-70B serve per replica, on each GPU?
-- (best over engines, dtypes and parallelism; the question in the README)
select gpu, max(b_max) as b_max
from marts.capacity_grid
where model = 'meta-llama/Llama-3.1-70B-Instruct' and context = 32768
group by gpu
order by b_max desc, gpu;
