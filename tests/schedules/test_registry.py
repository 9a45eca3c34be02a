"""The schedule registry: names, a new record, schedules without a closed form, too few micro-batches,
every schedule at p = 4, m = 8 against its closed form."""

from __future__ import annotations

import pytest

from helpers import BUILTIN_SCHEDULES, UNIT_COSTS, makespan
from simtrain import schedules
from simtrain.errors import ScheduleError, SpecError
from simtrain.schedules import REGISTRY, generate, replay, scaled_costs, validate
from simtrain.schedules.ir import Action, Schedule
from simtrain.schedules.record import ClosedForm, Costs, ScheduleRecord

pytestmark = pytest.mark.quick


def test_registry_names():
    assert list(REGISTRY) == BUILTIN_SCHEDULES
    with pytest.raises(SpecError, match="unknown schedule .zb-h9."):
        generate("zb-h9", 4, 8)
    for name in BUILTIN_SCHEDULES:
        kw = {"vpp": 2} if REGISTRY[name].takes("vpp") else {}  # interleaved-1f1b requires it
        assert generate(name, 2, 4, **kw).name == name  # each generator builds the schedule of its record
        assert f"\n{name}\n    {REGISTRY[name].description}." in schedules.__doc__


def _toy(pp: int, m: int, **_) -> Schedule:
    """GPipe under another name: every forward, then every backward."""
    return Schedule("toy", pp, m, tuple(range(pp)),
                    tuple(tuple([Action(r, "F", k) for k in range(m)] + [Action(r, "B", k) for k in range(m)])
                          for r in range(pp)))


def _toy_bubble(p: int, m: int, c: Costs, v: int) -> float:
    return (p - 1) * c.total


TOY = ScheduleRecord("toy", _toy, "A test schedule",
                     closed_form=ClosedForm(_toy_bubble, lambda p, stage, m, v: m, lambda p, m, v: m >= p,
                                            "m >= pp"))


def test_a_new_record_is_picked_up():
    reg = REGISTRY.with_record(TOY)
    assert "toy" in reg and "toy" not in REGISTRY  # a new registry; the built-in one is unchanged
    s = reg.load("toy", 3, 4)
    validate(s)
    assert s == reg.generate("toy", 3, 4)
    # its closed forms: makespan m (F + I + W) + (p - 1)(F + B), bubble (p - 1) t_mb, m in flight
    assert makespan(s) == reg.makespan("toy", 3, 4, 1, 1, 1) == 18
    assert reg.makespan("toy", 3, 2, 1, 1, 1) is None  # m < pp: not covered
    assert reg.closed_form("toy").bubble(3, 4, 0.3) == 2 * 0.3
    assert reg.closed_form("toy").in_flight(3, 0, 4) == 4
    assert "toy" in reg.closed_form_names() and "\ntoy\n    A test schedule." in reg.describe()
    with pytest.raises(SpecError, match="unknown schedule 'toy'"):
        REGISTRY.load("toy", 3, 4)
    with pytest.raises(ValueError, match="registered twice"):
        reg.with_record(TOY)


def test_no_closed_form_is_an_error_naming_the_schedule():
    for name in ("zb-auto", "zb-h1-4x8", "mine.csv"):
        with pytest.raises(SpecError) as e:
            REGISTRY.closed_form(name)
        msg = str(e.value)
        assert f"schedule '{name}'" in msg and "gpipe, 1f1b, interleaved-1f1b" in msg and "\n" not in msg
    assert REGISTRY.makespan("zb-auto", 4, 8, 1, 1, 1) is None
    assert REGISTRY.makespan("mine", 4, 8, 1, 1, 1) is None  # a schedule file: no formula
    assert REGISTRY.ranking_schedule("zb-auto") == "1f1b" and REGISTRY.ranking_schedule("zb-v") == "zb-v"
    with pytest.raises(ValueError, match="ranked as 'zb-auto'"):
        REGISTRY.with_record(ScheduleRecord("toy", _toy, "A test schedule", ranked_as="zb-auto"))


def test_minimum_micro_batches_refused_with_valid_values():
    with pytest.raises(ScheduleError, match=r"m=6 .*pp=4.*multiples of 4.*valid groups are \[6\]"):
        generate("interleaved-1f1b", 4, 6, vpp=2)
    with pytest.raises(ScheduleError, match=r"m=3.*pp=4.*valid m: 4 or more"):
        generate("interleaved-1f1b", 4, 3, vpp=2)
    with pytest.raises(ScheduleError, match=r"pp=3.*valid m"):
        generate("dualpipe", 3, 12)
    with pytest.raises(ScheduleError, match=r"m=6.*valid m: 8"):
        generate("dualpipev", 4, 6)
    # a group Megatron accepts: remainder 0 or >= pp
    s = generate("interleaved-1f1b", 4, 10, vpp=2, group=5)
    validate(s)


def table_4x8() -> list[tuple[str, float, float | None]]:
    """(schedule, simulated makespan, closed form) at p=4, m=8, F=I=W=1."""
    rows = []
    for name, kw in [("gpipe", {}), ("1f1b", {}), ("interleaved-1f1b", {"vpp": 2}),
                     ("interleaved-1f1b", {"vpp": 4}), ("zb-h1", {}), ("zb-h2", {}), ("zb-v", {}),
                     ("dualpipe", {}), ("dualpipev", {}), ("zb-auto", {})]:
        s = generate(name, 4, 8, **kw)
        r = replay(s, scaled_costs(s, *UNIT_COSTS))
        label = name + (f" v={kw['vpp']}" if kw else "")
        rows.append((label, r.makespan, REGISTRY.makespan(name, 4, 8, 1, 1, 1, vpp=kw.get("vpp", 1))))
    return rows


def test_table_p4_m8():
    rows = table_4x8()
    for label, ms, cf in rows:
        if cf is not None:
            assert ms == pytest.approx(cf), label
    assert dict((r[0], r[1]) for r in rows)["zb-auto"] <= dict((r[0], r[1]) for r in rows)["zb-h1"]


def test_vpp_only_for_schedules_that_interleave():
    REGISTRY.check_vpp("interleaved-1f1b", 2)
    for name in BUILTIN_SCHEDULES:
        REGISTRY.check_vpp(name, 1)  # one chunk per rank is every schedule's own
    takers = [n for n in BUILTIN_SCHEDULES if REGISTRY[n].takes("vpp")]
    for name in (n for n in BUILTIN_SCHEDULES if n not in takers):
        with pytest.raises(SpecError, match=rf"^--vpp 3: schedule {name} has no virtual stages to interleave; "
                                            rf"only {', '.join(takers)} takes? --vpp"):
            REGISTRY.check_vpp(name, 3)
    with pytest.raises(SpecError, match="--vpp 2: schedule mine.csv is a schedule file"):
        REGISTRY.check_vpp("mine.csv", 2)


def test_recent_schedules_are_kept_by_their_arguments():
    """A registry keeps its last RECENT schedules: the same arguments give the same schedule
    object, other costs another, at most RECENT kept; a parameter that cannot be a key (a
    list of per-stage costs) is generated each time."""
    from simtrain.schedules.registry import RECENT, Registry

    calls = []

    def counted(pp: int, m: int, **kw) -> Schedule:
        calls.append((pp, m, kw))
        return _toy(pp, m)

    reg = Registry([ScheduleRecord("counted", counted, "A counted test schedule")])
    a = reg.generate("counted", 2, 4, costs=(1.0, 1.0, 1.0))
    assert reg.generate("counted", 2, 4, costs=(1.0, 1.0, 1.0)) is a and len(calls) == 1
    assert reg.generate("counted", 2, 4, costs=(1.0, 2.0, 1.0)) is not a and len(calls) == 2
    for m in range(5, 5 + RECENT):
        reg.generate("counted", 2, m)
    reg.generate("counted", 2, 4, costs=(1.0, 1.0, 1.0))  # pushed out by RECENT others: built again
    assert len(calls) == 3 + RECENT
    reg.generate("counted", 2, 4, costs=[[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    reg.generate("counted", 2, 4, costs=[[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    assert len(calls) == 5 + RECENT
    assert generate("zb-auto", 3, 6, costs=(1.0, 1.2, 0.7)) is generate("zb-auto", 3, 6, costs=(1.0, 1.2, 0.7))
