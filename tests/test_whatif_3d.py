"""What-if and Compare plan a language model with the 3-D search (as `pase sweep` and `pase solve` do), say which
search ran, show fits per point with tokens/s and MFU, and chart no time for a plan that does not fit."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from pase.analysis.sweep import training_sweep
from pase.hardware.cluster import preset
from pase.models import batch_builder

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def llama(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.run()
    at.sidebar.selectbox(key="in_sample").set_value("llama3-8b").run()
    at.sidebar.number_input(key="in_llama3-8b_batch").set_value(64).run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_whatif_sweep_of_llama3_8b_shows_3d_plans_that_fit_with_tokens_and_mfu():
    at = llama("pages/what-if.py")
    assert any(c.value.startswith("Search: the **3-D search**") for c in at.caption), [c.value for c in at.caption]
    at.multiselect(key="wi_devices").set_value([1, 8, 16]).run()
    at.button(key="wi_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (table,) = [df.value for df in at.dataframe if "fits memory" in df.value.columns]
    rows = {int(r["devices"]): r for _, r in table.iterrows()}
    # On one H100 nothing fits (no time, rate or MFU); on 8 and 16 the 3-D search's plans fit, with their rates.
    assert rows[1]["fits memory"].startswith("no") and rows[1]["time to train"] == "does not fit"
    # Its empty cells read as a dash (issue 30), in columns that stay numeric.
    (element,) = [df for df in at.dataframe if "fits memory" in df.value.columns]
    assert element.proto.placeholder == "—" and table["MFU (% of peak)"].dtype.kind == "f"
    assert table["MFU (% of peak)"].isna()[list(table["devices"]).index(1)]
    for p in (8, 16):
        assert rows[p]["fits memory"].startswith("yes") and rows[p]["tokens/s"] > 0 and rows[p]["MFU (% of peak)"] > 0
    expected = training_sweep(batch_builder("llama3-8b"), [8], preset("dgx-h100", calibrated=True), 64)[0]
    assert rows[8]["plan"] == expected["label"]
    # The charts leave the point that does not fit out of every time and rate.
    (sweep,) = [c for c in at.get("plotly_chart") if c.proto.id.endswith("wi_sweep")]
    pase = [t for t in json.loads(sweep.proto.spec)["data"] if t.get("name") == "PaSE"]
    assert pase and all(t["y"][0] is None and t["y"][1] is not None for t in pase)


def test_compare_sets_the_3d_plan_beside_the_3d_baselines():
    at = llama("pages/compare.py")
    at.sidebar.number_input(key="in_devices").set_value(8).run()
    at.button(key="solve_compare").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (table,) = [df.value for df in at.dataframe if "configuration" in df.value.columns]
    assert list(table["plan"])[0] == "PaSE" and {"data parallel", "ZeRO-3 / FSDP", "Megatron"} <= set(table["plan"])
    (chart,) = [c for c in at.get("plotly_chart") if c.proto.id.endswith("cmp_training")]
    bars, labels = json.loads(chart.proto.spec)["data"]
    # Data parallelism does not fit 80 GB: its row stays, its bar is not drawn, the row says so.
    dp = list(table["plan"]).index("data parallel")
    assert table["step time"][dp] == "does not fit" and bars["x"][dp] is None
    assert labels["y"] == ["data parallel"] and labels["text"][0].startswith("does not fit in memory (needs ")
    # Numbers at 3 significant figures (1.36, 56.6, 60.5), not 1.359 beside the chart's 1.36x or 60.519 GB.
    for column in ("× the best's step", "MFU (% of peak)", "memory per device (GB)"):
        for v in table[column].dropna():
            assert len(f"{v:.6g}".replace(".", "").replace("-", "").lstrip("0").rstrip("0")) <= 3, (column, v)
    assert all(x is not None for i, x in enumerate(bars["x"]) if table["step time"][i] != "does not fit")
    # Issue 30: the cells a plan that does not fit has no number for read as a dash, not "None", in columns that
    # stay numeric (they sort as numbers).
    (element,) = [df for df in at.dataframe if "configuration" in df.value.columns]
    assert element.proto.placeholder == "—"
    for column in ("× the best's step", "MFU (% of peak)"):
        assert table[column][dp] is None or table[column][dp] != table[column][dp], (column, table[column][dp])
        assert table[column].dtype.kind == "f", (column, table[column].dtype)
