"""bench.stage_shares: each sample goes to the stage of its innermost frame that names one."""

from __future__ import annotations

from bench.stage_shares import REST, shares

RAW = "\n".join([
    "main (cli.py:1);AssembleContext.execute (a.py:2);_price_and_pack (a.py:3);pack (domain/packer.py:4) 5",
    "main (cli.py:1);AssembleContext.execute (a.py:2);_price_and_pack (a.py:3);Frame.element (l.py:9) 3",
    "main (cli.py:1);ContextAssemblyServicer._serve (s.py:1);assembly_to_proto (t.py:2);len (<b>) 2",
    "Runner.run (runners.py:1) 7",
    "",
])


def test_samples_go_to_the_innermost_stage_and_the_rest_is_kept() -> None:
    counts = shares(RAW)
    assert counts["packing (exact knapsack)"] == 5
    assert counts["pricing (elements rendered, count_each)"] == 3
    assert counts["response building (proto)"] == 2
    assert counts[REST] == 7
    assert sum(counts.values()) == 17
