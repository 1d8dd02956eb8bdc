"""The overhead rows the grid plans per model (`capacity.grid.planning._overhead_rows`): one for each batch setting
and GPU link kind the GPUs that serve a layout have together (`_Registry.overhead_cases`). The sizing joins every
deployment to its overhead row and keeps only those that find one, so a setting without its row would drop
deployments without a word; the oracle here is the engine settings themselves, row by row."""

from __future__ import annotations

from benchmarks.estimate import catalog_gpus
from capacity.grid import GridBuild
from capacity.grid.planning import _build_tables
from tests.test_grid import models


def test_every_setting_a_model_is_served_with_has_its_overhead_row() -> None:
    fleet = models()
    # the catalog's GPUs: batch settings shared by GPUs of different links (NVLink multicast or not, peer counts)
    build = GridBuild(fleet, catalog_gpus())
    reg = build._reg
    tables = _build_tables(reg, fleet)
    planned = {row[:8] for row in tables.overheads}  # model, engine, TP, PP, DP, seqs, batched tokens, link
    # settings rows: engine, class, TP, PP, DP, KV dtype, GPU, utilization, seqs, batched tokens, ..., link (last)
    asked = set()
    for row in reg.settings:
        e, cid, tp, pp, dp, seqs, batched, link = row[0], row[1], row[2], row[3], row[4], row[8], row[9], row[-1]
        if dp != 1:  # the DP layouts' own rows: their overheads follow the model's DP plan
            continue
        for m, (combos, _node) in enumerate(reg.plans):
            if reg.model_class[m] == cid and (tp, pp) in combos:
                asked.add((m, e, tp, pp, 1, seqs, batched, link))
    assert asked, "the fleet asks no overhead"
    assert not asked - planned, sorted(asked - planned)[:5]
    # and no more than the settings ask for (a quarter of the rows were pairs of a batch setting and a link that no
    # GPU has together): every single-DP row planned is one a setting asks for
    assert {key for key in planned if key[4] == 1} <= asked
