"""The What-if page's time to train with failures and checkpoints: drawn against devices, assumptions editable,
bad figures told in one line."""

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def _swept() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("pages/what-if.py").run()
    at.multiselect(key="wi_devices").set_value([2, 4, 8]).run()
    at.button(key="wi_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _goodput(at: AppTest) -> list[list[float]]:
    """Each line of the goodput panel, by device count."""
    chart = next(c for c in at.get("plotly_chart") if c.proto.id.endswith("wi_time_to_train"))
    spec = json.loads(chart.proto.spec)
    return [t["y"] for t in spec["data"] if t.get("yaxis") == "y2"]


def test_the_what_if_page_draws_days_goodput_and_cost_against_devices_with_editable_failures():
    at = _swept()
    assert not at.error, [e.value for e in at.error]
    calm = _goodput(at)
    assert calm and all(0 < g <= 1 for line in calm for g in line)
    at.text_input(key="wi_price").set_value("2").run()
    spec = json.loads(next(c for c in at.get("plotly_chart") if c.proto.id.endswith("wi_time_to_train")).proto.spec)
    assert any("Cost" in a["text"] for a in spec["layout"]["annotations"])
    # A thousand times Llama 3's failure rate, a slow file system and long restarts: goodput falls.
    at.text_input(key="wi_fail_rate").set_value("20000").run()  # per million GPU-hours
    at.text_input(key="wi_restart").set_value("30").run()
    at.text_input(key="wi_storage").set_value("0.5").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    stormy = _goodput(at)
    assert all(s < c for before, after in zip(calm, stormy) for c, s in zip(before, after))
    # Goodput falls as the job grows: more devices, more failures a day.
    assert all(line == sorted(line, reverse=True) for line in stormy)


def test_the_what_if_page_tells_a_bad_failure_figure_in_one_line():
    at = _swept()
    for key, value, words in [("wi_fail_rate", "0", "interruption rate"), ("wi_storage", "-3", "storage"),
                              ("wi_restart", "soon", "type numbers")]:
        at.text_input(key=key).set_value(value).run()
        assert not at.exception
        assert len(at.error) == 1 and words in at.error[0].value, [e.value for e in at.error]
        at.text_input(key=key).set_value({"wi_fail_rate": "20", "wi_storage": "2000",
                                          "wi_restart": "10"}[key]).run()
    assert not at.error
