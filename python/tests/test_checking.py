"""madpipe.validate and madpipe.simulate."""

import pytest

import madpipe


def test_simulation_reaches_the_planned_period(resnet50):
    plan = madpipe.plan(resnet50, gpus=4, memory="8GiB", bandwidth="12GB/s")
    result = madpipe.simulate(plan)
    assert result.period_ms == pytest.approx(plan.period_ms, rel=1e-9)
    assert result.step_ms > result.period_ms
    assert len(result.peak_memory_bytes) == 4
    assert max(result.peak_memory_bytes) <= 8 << 30
    kinds = {op["kind"] for op in result.ops}
    assert {"F", "B"} <= kinds
    assert sum(op["kind"] == "F" for op in result.ops) == result.micro_batches * len(plan.stages)


def test_simulation_options_are_checked(resnet50):
    plan = madpipe.plan(resnet50, gpus=2, memory="16GiB", bandwidth="12GB/s")
    assert madpipe.simulate(plan, micro_batches=6, policy="asap").micro_batches == 6
    with pytest.raises(madpipe.Error, match="valid: timetable, asap"):
        madpipe.simulate(plan, policy="soon")
    with pytest.raises(madpipe.Error, match="micro_batches"):
        madpipe.simulate(plan, micro_batches=-1)


def test_validate_reports_every_broken_rule(resnet50):
    data = madpipe.plan(resnet50, gpus=4, memory="8GiB", bandwidth="12GB/s").to_dict()
    data["stages"][0]["forward_ms"] += 1.0
    data["predicted"]["memory_bytes"][0] = 1
    violations = madpipe.validate(data)
    fields = [v.field for v in violations]
    assert len(violations) >= 2
    assert any(field.startswith("/pattern/ops/") and field.endswith("duration_ms") for field in fields)
    assert any(field.startswith("/predicted/memory_bytes") for field in fields)
    with pytest.raises(madpipe.Error):
        madpipe.simulate(data)


def test_validate_against_the_wrong_profile(resnet50):
    plan = madpipe.plan(resnet50, gpus=4, memory="8GiB", bandwidth="12GB/s")
    other = madpipe.read_profile(resnet50).to_dict()
    other["layers"][0]["forward_ms"] *= 2
    assert madpipe.validate(plan, other)
