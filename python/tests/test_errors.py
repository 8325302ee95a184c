"""madpipe.Error speaks Python: keyword arguments, not command-line options; unknown keywords are
named with the closest accepted one; NoPlanFits carries the memory that would fit."""

import pytest

import madpipe
from madpipe._errors import speak_python

PLATFORM = dict(gpus=4, memory="8GiB", bandwidth="12GB/s")


@pytest.mark.parametrize("text, spoken", [
    ("; with --remat rotor (recompute activations) it is 3.9 GiB", '; with remat="rotor" (recompute activations) it is 3.9 GiB'),
    ("finds a plan with --algorithm zb-v is 5.4 GiB", 'finds a plan with algorithm="zb-v" is 5.4 GiB'),
    ("a longer --time-limit may find a shorter period", "a longer time_limit may find a shorter period"),
    ("over 8 micro-batches per step (--micro-batches)", "over 8 micro-batches per step (micro_batches)"),
    ("--scheduler ilp needs a MILP solver (--solver cbc)", 'scheduler="ilp" needs a MILP solver (milp_backend="cbc")'),
    ("--memory 8GiB is too small", "memory 8GiB is too small"),
    ("give --peak-flops and --memory-bandwidth", "give --peak-flops and --memory-bandwidth"),
    ("layers 10..20 -- nothing else", "layers 10..20 -- nothing else"),
])
def test_options_read_as_keywords(text, spoken):
    assert speak_python(text) == spoken


def test_no_plan_fits_names_keywords_and_the_memory_that_fits(resnet50):
    options = dict(gpus=4, bandwidth="12GB/s", algorithm="contiguous")
    with pytest.raises(madpipe.NoPlanFits) as error:
        madpipe.plan(resnet50, memory="1GiB", **options)
    message = str(error.value)
    assert 'with algorithm="contiguous" is 5.4 GiB' in message and 'with remat="rotor"' in message
    assert "--" not in message
    assert isinstance(error.value, madpipe.Error) and error.value.kind == "invalid_input"
    assert error.typename == "NoPlanFits" and type(error.value).__module__ == "madpipe"
    smallest = error.value.smallest_memory_bytes
    assert smallest == madpipe.smallest_feasible_memory(resnet50, **options)
    assert madpipe.plan(resnet50, memory=smallest, **options).period_ms > 0
    with pytest.raises(madpipe.NoPlanFits) as just_below:
        madpipe.plan(resnet50, memory=smallest - (64 << 20), **options)
    assert just_below.value.smallest_memory_bytes == smallest


def test_other_errors_carry_no_memory(resnet50):
    with pytest.raises(madpipe.Error) as error:
        madpipe.plan(resnet50, **{**PLATFORM, "gpus": 0})
    assert type(error.value) is madpipe.Error and error.value.smallest_memory_bytes is None


@pytest.mark.parametrize("call", [
    lambda p: madpipe.plan(p, **PLATFORM, remaat="rotor"),
    lambda p: madpipe.compare(p, gpus=2, memory="1GiB", bandwidth="1GB/s", remaat="rotor"),
    lambda p: madpipe.lower_bound(p, gpus=2, bandwidth="1GB/s", remaat="rotor"),
    lambda p: madpipe.smallest_feasible_memory(p, gpus=2, bandwidth="1GB/s", remaat="rotor"),
])
def test_unknown_keywords_name_the_closest_one(resnet50, call):
    with pytest.raises(madpipe.Error) as error:
        call(resnet50)
    assert error.value.field == "remaat"
    assert "no keyword argument 'remaat' (did you mean 'remat'?)" in str(error.value)
    assert "remat_slots, scheduler, split_backward" in str(error.value)


def test_each_function_accepts_its_own_keywords_only(resnet50):
    plan = madpipe.plan(resnet50, **PLATFORM)
    with pytest.raises(madpipe.Error, match=r"simulate\(\) has no keyword argument 'micro_batch' "
                                            r"\(did you mean 'micro_batches'\?\); it takes micro_batches, plan, policy$"):
        madpipe.simulate(plan, micro_batch=4)
    with pytest.raises(madpipe.Error, match="compare.. has no keyword argument 'algorithm' .did you mean 'algorithms'"):
        madpipe.compare(resnet50, **PLATFORM, algorithm="gpipe")
    with pytest.raises(madpipe.Error, match="no keyword argument 'memory'") as error:
        madpipe.smallest_feasible_memory(resnet50, **PLATFORM)
    assert "did you mean" not in str(error.value)
    with pytest.raises(madpipe.Error, match="no keyword argument 'colour'; it takes"):
        madpipe.plan(resnet50, **PLATFORM, colour="blue")
    assert madpipe.lower_bound(resnet50, **PLATFORM, remat="rotor") == madpipe.lower_bound(resnet50, **PLATFORM)


def test_planning_options_are_the_keywords_of_plan():
    import inspect
    keywords = set(inspect.signature(madpipe.plan).parameters) - {"profile", "gpus", "memory", "bandwidth"}
    assert set(madpipe.PlanningOptions.__annotations__) == keywords
