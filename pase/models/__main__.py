"""Write every sample graph, at its default sizes, to ``sample_graphs/NAME.json``.

Usage: ``python -m pase.models [DIRECTORY]`` (default ``sample_graphs``). A
test checks the committed files equal what the builders produce. The large
language models (:data:`~pase.models.LANGUAGE_MODELS`) are built on demand
and not written: their files would take megabytes each.
"""

import sys
from pathlib import Path

from pase.io.graph_json import save_graph
from pase.models import LANGUAGE_MODELS, SAMPLES, sample

out = Path(sys.argv[1] if len(sys.argv) > 1 else "sample_graphs")
out.mkdir(parents=True, exist_ok=True)
for name in (n for n in SAMPLES if n not in LANGUAGE_MODELS):
    save_graph(sample(name), out / f"{name}.json")
    print(f"wrote {out / name}.json")
