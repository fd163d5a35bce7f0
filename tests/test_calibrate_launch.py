"""pase calibrate's launch timings (pase.calibrate.profile.Timer, profile_launch; pase.calibrate.fit.launch_cases).

The Timer is checked against a small event simulation of a host issuing work to a GPU's queue (:class:`Sim`):
each kernel costs the host some time before and after it is issued and the GPU its duration; a CUDA event
takes the GPU's time when the GPU reaches it. Its five ways must give back the simulation's own figures.
"""

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pase.calibrate import profile
from pase.calibrate.command import launch_lines
from pase.calibrate.fit import calibrate, launch_cases, residuals
from pase.errors import ClusterError
from pase.hardware.calibration import load_calibration, save_calibration

ROOT = Path(__file__).resolve().parents[1]
H200 = json.loads((ROOT / "pase" / "hardware" / "data" / "h200-kernels.json").read_text())
H200_CALIBRATION = load_calibration(ROOT / "pase" / "hardware" / "data" / "dgx-h200.json")
US = 1e-6


class Sim:
    """A host and one GPU stream: host time ``h`` (what ``clock()`` reads), the GPU busy until ``free``."""

    def __init__(self, clock_hz=1.98e9, event_host=1 * US, sleep_host=3 * US, graph_host=6 * US):
        self.h, self.free, self.clock_hz = 0.0, 0.0, clock_hz
        self.event_host, self.sleep_host, self.graph_host = event_host, sleep_host, graph_host
        self.capturing: list | None = None
        self.kernels = 0

    def clock(self) -> float:
        return self.h

    def run(self, duration: float) -> None:
        """The GPU runs a kernel of ``duration`` seconds issued now, after what is queued."""
        self.free = max(self.free, self.h) + duration

    def kernel(self, duration: float, before: float, after: float) -> None:
        """A call: the host works ``before``, issues a kernel of ``duration`` (or captures it), works ``after``."""
        self.h += before
        if self.capturing is not None:
            self.capturing.append(duration)
        else:
            self.run(duration)
            self.kernels += 1
        self.h += after

    def torch(self):
        """The slice of torch's CUDA API that the Timer uses, acting on this simulation."""
        sim = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = max(sim.free, sim.h)
                sim.h += sim.event_host

            def query(self):
                return self.t <= sim.h

            def synchronize(self):
                sim.h = max(sim.h, self.t)

            def elapsed_time(self, end):
                return (end.t - self.t) * 1e3

        class Graph:
            def __init__(self):
                self.kernels = []

            def replay(self):
                sim.h += sim.graph_host
                sim.run(sum(self.kernels))

        @contextlib.contextmanager
        def graph(g):
            sim.capturing = g.kernels
            yield
            sim.capturing = None

        def synchronize():
            sim.h = max(sim.h, sim.free)

        def sleep(cycles):
            sim.h += sim.sleep_host
            sim.run(cycles / sim.clock_hz)

        class Stream:
            def wait_stream(self, other):
                pass

        cuda = SimpleNamespace(Event=Event, synchronize=synchronize, _sleep=sleep, Stream=Stream,
                               current_stream=Stream, stream=lambda s: contextlib.nullcontext(),
                               CUDAGraph=Graph, graph=graph)
        return SimpleNamespace(cuda=cuda)


def _timer(sim: Sim) -> profile.Timer:
    return profile.Timer(sim.torch(), warmup=2, reps=5, clock=sim.clock)


# (GPU seconds, host seconds before issuing, after): a small kernel the host outpaces, a large one, one in between.
KERNELS = [(4 * US, 9 * US, 13 * US), (700 * US, 9 * US, 13 * US), (20 * US, 6 * US, 4 * US)]


@pytest.mark.parametrize("d, before, after", KERNELS)
def test_the_gpu_and_host_ways_give_back_the_simulated_kernel_and_host_times(d, before, after):
    sim = Sim()
    timer = _timer(sim)
    fn = lambda: sim.kernel(d, before, after)  # noqa: E731
    assert timer.gpu(fn, 20) == pytest.approx(d, rel=1e-9)
    assert timer.host(fn, 20) == pytest.approx(before + after, rel=1e-9)


@pytest.mark.parametrize("d, before, after", KERNELS)
def test_a_kernel_timed_alone_holds_the_host_s_time_before_it_and_the_longer_of_it_and_the_host_after(d, before,
                                                                                                      after):
    sim = Sim()
    alone = _timer(sim).alone(lambda: sim.kernel(d, before, after))
    # By hand: the start event, the host's work before the kernel, then the GPU waits for the later of the
    # kernel's end and the end event's issue.
    assert alone == pytest.approx(sim.event_host + before + max(d, after), rel=1e-9)
    assert alone > d


@pytest.mark.parametrize("d, before, after", KERNELS)
def test_back_to_back_calls_go_at_the_slower_of_the_host_and_the_gpu(d, before, after):
    sim = Sim()
    calls = 20
    per_call = _timer(sim).stream(lambda: sim.kernel(d, before, after), calls)
    # Within the one-off start (an event and the first call's host work) spread over the calls.
    assert per_call == pytest.approx(max(d, before + after), abs=(sim.event_host + before + d) / calls)


def test_a_graph_replay_costs_the_kernels_and_one_launch():
    sim = Sim()
    calls = 20
    per_call = _timer(sim).graph(lambda: sim.kernel(4 * US, 9 * US, 13 * US), calls)
    assert per_call == pytest.approx(4 * US + (sim.event_host + sim.graph_host) / calls, rel=1e-9)


def test_the_sleep_clock_is_measured_whatever_the_host_s_time_around_it():
    sim = Sim(clock_hz=1.755e9, sleep_host=40 * US)
    assert _timer(sim).cycles_per_s == pytest.approx(1.755e9, rel=1e-9)


def test_a_hold_shorter_than_the_host_s_issue_is_lengthened_until_it_hides_it():
    # 20 calls of 0.5 ms of host work each: 10 ms to issue, five times the first 2 ms hold.
    sim = Sim()
    timer = _timer(sim)
    assert timer.gpu(lambda: sim.kernel(30 * US, 300 * US, 200 * US), 20) == pytest.approx(30 * US, rel=1e-9)
    assert timer._hold_s >= 10e-3


def test_a_sleep_kernel_that_does_not_sleep_is_refused_in_one_line():
    sim = Sim(clock_hz=float("inf"))
    with pytest.raises(ClusterError, match="sleep kernel") as exc:
        _timer(sim).cycles_per_s
    assert "\n" not in str(exc.value)


class _StubTimer:
    """Fixed figures per call, each way calling ``fn`` once (profile_launch's plumbing, without a GPU)."""

    def __init__(self):
        self.calls = 0

    def _call(self, fn, value):
        fn()
        self.calls += 1
        return value

    def alone(self, fn):
        return self._call(fn, 30 * US)

    def gpu(self, fn, calls):
        return self._call(fn, 8 * US)

    def stream(self, fn, calls):
        return self._call(fn, 24 * US)

    def host(self, fn, calls):
        return self._call(fn, 22 * US)

    def graph(self, fn, calls):
        return self._call(fn, 9 * US)


def test_profile_launch_rows_are_what_the_fit_reads(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(profile, "_QUICK_LAUNCH_SQUARES", (64,))
    monkeypatch.setattr(profile, "_QUICK_LAUNCH_EXPERTS", (("a tiny expert fc1", 32, 48, 16, 3),))
    section = profile.profile_launch(torch, torch.device("cpu"), _StubTimer(), quick=True, fp8=False,
                                     say=lambda _: None)
    cases = [r["case"] for r in section["rows"]]
    assert cases == ["bf16 product 64^3", "bf16 copy 1024 x 1024", "a tiny expert fc1: 3 experts, 32 tokens each"]
    copy = section["rows"][1]
    assert copy["bytes"] == 2 * 1024 * 1024 * 2  # a 1024 x 1024 BF16 tensor read and written
    expert = section["rows"][-1]
    assert (expert["kernels"], expert["m"], expert["n"], expert["k"]) == (3, 32, 48, 16)
    assert expert["flops"] == 3 * 2 * 32 * 48 * 16
    measurements = {**H200, "launch": section}
    per_kernel = launch_cases(measurements, H200_CALIBRATION.efficiency, 989e12, 1979e12)
    assert [c["case"] for c in per_kernel] == cases
    assert per_kernel[-1]["gpu_s"] == pytest.approx(8 * US / 3)
    # The copy priced as the calibration prices a copy of its bytes: the H200's fitted bandwidth and overhead.
    e = H200_CALIBRATION.efficiency
    assert per_kernel[1]["model_s"] == pytest.approx(copy["bytes"] / e.memory_Bps + e.kernel_overhead_s)
    assert all(c["bound"] == "host" for c in per_kernel)  # 24 us back to back against 8 of the GPU's


def _launch_row(case, kernels, alone, gpu, stream, host, m=2048, n=2048, k=2048, dtype="bf16"):
    return {"case": case, "dtype": dtype, "kernels": kernels, "m": m, "n": n, "k": k,
            "flops": 2.0 * m * n * k * kernels, "alone_s": alone * US, "gpu_s": gpu * US, "stream_s": stream * US,
            "host_s": host * US}


def test_a_calibration_keeps_its_launch_cases_and_prints_them(tmp_path):
    rows = [_launch_row("bf16 product 2048^3", 1, 30.0, 17.5, 18.0, 21.0),
            _launch_row("experts", 16, 16 * 28.0, 16 * 6.0, 16 * 21.0, 16 * 20.0, m=2048, n=1536, k=2048,
                        dtype="fp8")]
    measurements = {**H200, "launch": {"rows": rows}}
    cal = calibrate(measurements, peak_flops=989e12, fp8_peak_flops=1979e12, device="NVIDIA H200", date="2026-12-05",
                    where="a test")
    launch = cal.fit["launch"]["cases"]
    assert [c["bound"] for c in launch] == ["gpu", "host"]
    assert launch[1]["alone_s"] == pytest.approx(28 * US) and launch[1]["host_s"] == pytest.approx(20 * US)
    # The launch rows are not fitted: the curves are the committed H200 fit's, made without them.
    assert cal.efficiency == H200_CALIBRATION.efficiency
    # A launch product is priced as the same product among the file's rows (timed alone) is.
    priced = dict((label, model) for label, _, model in
                  residuals(H200, cal.efficiency, 989e12, 1979e12)["gemm_fwd"])["square sq m=2048 n=2048 k=2048"]
    assert launch[0]["model_s"] == pytest.approx(priced, rel=1e-9)
    save_calibration(cal, tmp_path / "c.json")
    assert load_calibration(tmp_path / "c.json").fit["launch"] == json.loads(json.dumps(cal.fit["launch"]))
    lines = launch_lines(launch)
    assert len(lines) == 3 and "host-bound eager" in lines[2] and "host-bound" not in lines[1]
    assert lines[2].split()[1:6] == ["28.0", "6.0", "20.0", "21.0", "-"]  # us per kernel; no graph measured


@pytest.mark.parametrize("broken, named", [(lambda r: r.pop("gpu_s"), "gpu_s"), (lambda r: r.update(host_s=-1.0),
                                                                                  "host_s"),
                                           (lambda r: r.update(case=3), "case")])
def test_a_malformed_launch_row_is_refused_naming_its_column(broken, named):
    row = _launch_row("bf16 product 2048^3", 1, 30.0, 17.5, 18.0, 21.0)
    broken(row)
    with pytest.raises(ClusterError, match=f"launch row 0.*{named}"):
        calibrate({**H200, "launch": {"rows": [row]}}, peak_flops=989e12, fp8_peak_flops=1979e12,
                  device="NVIDIA H200", date="2026-12-05", where="a test")
