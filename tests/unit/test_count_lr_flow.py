"""``scripts/count_lr_flow.py``'s counting on a hand-made call graph of two layers (issue 33):
which returns are climbs and which climbs are round trips, worked out by hand below.

``fake.low`` (layer 0) makes a ``Plan`` holding the learning rate; ``fake.high`` (layer 1)
calls it. A plan returned up and handed to a lower function, or to the plan's own method,
is a round trip; one whose ``rate`` property is only read is not (the counter's property
rule), although the getter's return is a climb of its own."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "count_lr_flow.py"
LR = 0.5

LOW = '''
from dataclasses import dataclass


@dataclass
class Plan:
    lr: float

    @property
    def rate(self):
        return self.lr

    def check(self):
        return None


def make(lr):
    return Plan(lr)


def use(plan):
    return None
'''

HIGH = '''
from fake import low


def by_property(lr):
    plan = low.make(lr)
    return plan.rate


def by_method(lr):
    plan = low.make(lr)
    plan.check()


def handed_down(lr):
    plan = low.make(lr)
    low.use(plan)


def kept(lr):
    low.make(lr)
'''


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("count_lr_flow", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["count_lr_flow"] = module  # its dataclass reads its own module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    yield module
    sys.modules.pop("count_lr_flow", None)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    package = tmp_path / "fake"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text(LOW)
    (package / "high.py").write_text(HIGH)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fake", "fake.low", "fake.high"):
        sys.modules.pop(name, None)
    yield importlib.import_module("fake.high"), package.resolve()
    for name in ("fake", "fake.low", "fake.high"):
        sys.modules.pop(name, None)


def counted(script, fake, function: str):
    high, package = fake
    flow = script.Flow(package, {"fake": 0, "fake.low": 0, "fake.high": 1}, {LR})
    flow.trace(lambda: getattr(high, function)(LR))
    return flow


MAKE = ("fake.low.make", "fake.high.{}")


@pytest.mark.parametrize("function, trip", [
    ("handed_down", "fake.high.handed_down -> fake.low.use (plan)"),  # down, up, down again
    ("by_method", "fake.high.by_method -> fake.low.Plan.check (self)"),  # the plan's own code works on it
    ("kept", None),  # up, and it stays there
])
def test_a_climb_handed_down_again_is_a_round_trip(script, fake, function, trip):
    flow = counted(script, fake, function)
    climb = (MAKE[0], MAKE[1].format(function))
    assert flow.climbs == {climb: 1}
    assert flow.round_trips == ({} if trip is None else {climb: trip})
    assert flow.names == {"lr": {"fake.low.make", f"fake.high.{function}"}}


def test_a_property_read_of_a_climbed_object_is_no_round_trip(script, fake):
    flow = counted(script, fake, "by_property")
    # two climbs: the plan, and the rate its getter returns; neither goes down again
    assert flow.climbs == {(MAKE[0], "fake.high.by_property"): 1,
                           ("fake.low.Plan.rate", "fake.high.by_property"): 1}
    assert flow.round_trips == {}


def test_read_only_tells_a_getter_from_a_method(script, fake):
    high, _ = fake
    plan = high.low.make(LR)
    getter = type(plan).rate.fget.__code__
    assert script.read_only(getter, plan)
    assert not script.read_only(type(plan).check.__code__, plan)
    assert not script.read_only(getter, object())  # another class's getter of the same name: no
