"""``pase solve-instance``: the exact search on a solver-level instance file (the ../shared/instances format)."""

from __future__ import annotations

import json

from pase.cli.text import printable, table
from pase.limits import (
    MAX_INSTANCE_BYTES,
)
from pase.search.exact import DEFAULT_ORDERING, ORDERINGS


def add_parser(sub, help: str) -> None:
    """Add the sub-command's parser to ``sub`` (argparse's sub-parsers), ``help`` its line in ``pase --help``."""
    p = sub.add_parser("solve-instance", help=help)
    p.add_argument("file", help="instance file: JSON, gzip-compressed or not (at most "
                                f"{MAX_INSTANCE_BYTES / 2**20:.0f} MiB uncompressed)")
    p.add_argument("--ordering", choices=ORDERINGS, default=DEFAULT_ORDERING,
                   help="vertex ordering of the search (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=run)


def run(args) -> int:
    """``pase solve-instance``: the instance's optimal assignment and cost; the exit status."""
    from pase.io.instance import load_instance
    from pase.search.exact import solve

    cost_graph, meta = load_instance(args.file)
    result = solve(cost_graph, ordering=args.ordering)
    if args.json:
        print(json.dumps({
            "name": meta["name"],
            "devices": meta["devices"],
            "cost": result.cost,
            "assignment": result.assignment.tolist(),
            "search_time_s": result.search_time_s,
            "ordering_name": args.ordering,
            "ordering": list(result.ordering),
            "max_table_entries": result.max_table_entries,
            "total_table_entries": result.total_table_entries,
            "max_dependent_set": result.max_dependent_set,
            "total_work": result.total_work,
            "pruned_configs": result.pruned_configs,
            "peak_table_bytes": result.peak_table_bytes,
        }, allow_nan=False))
        return 0
    rows = [["node", "op", "configuration", "index"]]
    for v, a in enumerate(result.assignment.tolist()):
        node = meta["nodes"][v]
        config = node["configs"][a] if node["configs"] is not None else "-"
        rows.append([str(v), str(node["op"] or "-"), str(config), str(a)])
    print(table(rows))
    print(f"\n{printable(meta['name'] or args.file)}: {cost_graph.num_nodes} nodes, {len(cost_graph.edges)} edges, "
          f"{sum(cost_graph.config_counts)} configurations")
    print(f"optimal cost {result.cost:.12g}")
    print(f"search {result.search_time_s:.3f} s with ordering {args.ordering}: largest dependent set "
          f"{result.max_dependent_set}, largest table {result.max_table_entries:,} entries, "
          f"{result.total_work:,} sums, {result.pruned_configs} dominated configurations dropped")
    return 0

