"""`nas.train.latency`: warm-up, a median to a set precision with counted caps, the spread
beside it, and agreement on re-measurement within that spread. The stopping
rule is checked on a scripted clock (no waiting, no timing assertion)."""

import jax
import numpy as np
import pytest

from nas.graph import Model
from nas.train.latency import (
    LatencySettings,
    inference_latency,
    median_interval,
    spread_of,
    time_calls,
)
from nas.zoo import cnn


class ScriptedClock:
    """A clock each timed call advances by the next duration of a script (in ms)."""

    def __init__(self, durations_ms):
        self.now, self.durations, self.calls = 0.0, list(durations_ms), 0

    def __call__(self):
        return self.now

    def call(self):
        self.now += self.durations[self.calls % len(self.durations)] / 1e3
        self.calls += 1


def test_a_steady_call_stops_at_the_first_check_with_its_median_and_spread():
    clock = ScriptedClock([1.0, 1.01, 0.99, 1.0])
    settings = LatencySettings(warmup=3, min_calls=20, check_every=10, precision=0.02)
    timing = time_calls(clock.call, settings, clock=clock)
    assert timing.calls == 20 and timing.precise and clock.calls == 23  # 3 warm-up calls
    assert timing.median_ms == pytest.approx(1.0)
    assert timing.iqr_ms == pytest.approx(0.005, abs=1e-6)  # quartiles 0.995 and 1.0
    assert timing.metrics() == {"latency_ms": timing.median_ms,
                                "latency_ms_iqr": timing.iqr_ms, "latency_ms_calls": 20.0}


def test_a_noisy_call_is_timed_until_the_count_cap():
    clock = ScriptedClock([1.0, 3.0])  # half the calls 3x slower: the median never settles
    settings = LatencySettings(warmup=0, min_calls=10, max_calls=60, check_every=10,
                               precision=0.01, max_seconds=1e6)
    timing = time_calls(clock.call, settings, clock=clock)
    assert timing.calls == 60 and not timing.precise
    assert timing.iqr_ms == pytest.approx(2.0)


def test_the_clock_is_only_a_safety_net():
    clock = ScriptedClock([1000.0, 3000.0])  # 1-3 s a call: past max_seconds at a check
    settings = LatencySettings(warmup=0, min_calls=10, max_calls=1000, check_every=10,
                               precision=0.01, max_seconds=5.0)
    timing = time_calls(clock.call, settings, clock=clock)
    assert timing.calls == 10 and not timing.precise


def test_the_median_interval_narrows_with_more_samples():
    rng = np.random.default_rng(0)
    few, many = rng.normal(1.0, 0.1, 30), rng.normal(1.0, 0.1, 3000)
    lo_f, hi_f = median_interval(few)
    lo_m, hi_m = median_interval(many)
    assert lo_f <= np.median(few) <= hi_f and (hi_m - lo_m) < (hi_f - lo_f) / 5
    assert spread_of([1, 2, 3, 4, 5]) == (3.0, 2.0)


@pytest.mark.parametrize("field, value, match", [
    ("batch", 0, "config field 'batch' must be an int >= 1"),
    ("device", "tpu", "config field 'device' must be one of"),
    ("precision", 0.0, "config field 'precision' must be a number > 0"),
    ("max_calls", 5, r"config field 'max_calls' must be >= min_calls"),
    ("warmup", -1, "config field 'warmup' must be an int >= 0"),
])
def test_bad_settings_are_one_line(field, value, match):
    with pytest.raises(ValueError, match=match):
        LatencySettings(**{field: value})


@pytest.mark.slow
def test_a_remeasurement_agrees_within_the_recorded_spread():
    graph, constants, _ = cnn.CifarNet()
    model = Model(graph, constants)
    x = np.zeros((1, 32, 32, 3), np.float32)
    variables = model.init(jax.random.key(0), x, deterministic=True, training=False)

    def infer(v, batch):
        return model.apply(v, batch, deterministic=True, training=False)

    settings = LatencySettings(min_calls=30)
    first = inference_latency(infer, variables, (32, 32, 3), settings)
    second = inference_latency(infer, variables, (32, 32, 3), settings)
    on_cpu = inference_latency(infer, variables, (32, 32, 3),
                               LatencySettings(min_calls=30, device="cpu", batch=2))
    for t in (first, second, on_cpu):
        assert t.median_ms > 0 and t.iqr_ms >= 0 and t.calls >= 30
    # a tolerance from the spreads (and a tenth for the timer at this scale), not a speed
    tolerance = 2.0 * (first.iqr_ms + second.iqr_ms) + 0.1 * min(first.median_ms,
                                                                second.median_ms)
    assert abs(first.median_ms - second.median_ms) <= tolerance, (first, second)
