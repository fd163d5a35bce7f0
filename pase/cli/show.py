"""``pase show``: a model's layers, dimensions and configuration counts in both split spaces."""

from __future__ import annotations

from dataclasses import replace

from pase.cli.options import add_cluster_options, add_model_options, cluster_of, load_model, options_of
from pase.cli.text import printable, table
from pase.ir.configs import config_counts


def add_parser(sub, help: str) -> None:
    """Add the sub-command's parser to ``sub`` (argparse's sub-parsers), ``help`` its line in ``pase --help``."""
    p = sub.add_parser("show", help=help)
    add_model_options(p)
    add_cluster_options(p)  # the mesh split space counts placements on the cluster's mesh
    p.set_defaults(func=run)


def run(args) -> int:
    """``pase show``: the layers and their configuration counts in both split spaces; the exit status."""
    graph, options, cluster = load_model(args), options_of(args), cluster_of(args)
    shape = cluster.mesh.shape
    # Both split spaces' counts: the paper's divisors and the mesh placements of this cluster's mesh.
    counts = {space: config_counts(graph, args.devices, replace(options, split_space=space).on_mesh(shape))
              for space in ("divisors", "mesh")}
    rows = [["layer", "op", "dims", "configurations (divisors)", "configurations (mesh)"]]
    for layer in graph:
        dims = " ".join(f"{d}={n}" for d, n in zip(layer.dims, layer.sizes))
        rows.append([layer.name, layer.op, dims] + [str(c[layer.name]) for c in counts.values()])
    print(table(rows))
    totals = ", ".join(f"{sum(c.values()):,} {space} configurations (largest {max(c.values()):,})"
                       for space, c in counts.items())
    print(f"\n{printable(graph.name)}: {len(graph)} layers, {graph.parameter_count / 1e6:.1f}M parameters; on "
          f"{args.devices} devices ({' x '.join(map(str, shape))} mesh): {totals}")
    return 0

