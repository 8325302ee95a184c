"""madpipe.plan, compare, lower_bound and smallest_feasible_memory against the command line."""

import json
import logging
import re
import subprocess

import pytest

import madpipe

PLATFORM = dict(gpus=4, memory="8GiB", bandwidth="12GB/s")


def without_solver_time(plan_dict):
    plan_dict.get("solver", {}).pop("seconds", None)
    return plan_dict


def test_plan_is_valid_and_not_below_the_lower_bound(resnet50):
    plan = madpipe.plan(resnet50, **PLATFORM)
    assert madpipe.validate(plan, resnet50) == []
    assert plan.period_ms >= plan.lower_bound_ms > 0
    assert plan.lower_bound_ms == pytest.approx(madpipe.lower_bound(resnet50, gpus=4, bandwidth="12GB/s"))
    assert max(plan.memory_bytes) <= 8 << 30
    assert [s["id"] for s in plan.stages] == list(range(len(plan.stages)))
    assert plan.planning_seconds >= 0


def test_plan_equals_the_command_line_plan(resnet50, madpipe_bin, tmp_path):
    output = tmp_path / "plan.json"
    subprocess.run([madpipe_bin, "plan", "--profile", str(resnet50), "--gpus", "4", "--memory", "6GiB",
                    "--bandwidth", "12GB/s", "--quiet", "--output", str(output)],
                   check=True, capture_output=True)
    from_python = madpipe.plan(resnet50, gpus=4, memory="6GiB", bandwidth="12GB/s")
    assert without_solver_time(from_python.to_dict()) == without_solver_time(json.loads(output.read_text()))


def test_errors_carry_the_command_line_message(resnet50, madpipe_bin):
    command = subprocess.run([madpipe_bin, "plan", "--profile", str(resnet50), "--gpus", "4", "--memory",
                              "1GiB", "--bandwidth", "12GB/s", "--quiet"], capture_output=True, text=True)
    assert command.returncode != 0
    with pytest.raises(madpipe.Error) as error:
        madpipe.plan(resnet50, gpus=4, memory="1GiB", bandwidth="12GB/s")
    # The command's message, its options written as keyword arguments.
    expected = command.stderr.strip().splitlines()[-1].replace("--remat rotor", 'remat="rotor"')
    assert "madpipe: error: " + str(error.value) == expected
    assert "no madpipe plan fits in 1.0 GiB per GPU" in str(error.value)
    assert error.value.kind == "invalid_input"


@pytest.mark.parametrize("keywords, field, words", [
    (dict(gpus=0), "gpus", "must be >= 1, got 0"),
    (dict(gpus=2.5), "gpus", "expected an integer"),
    (dict(memory="8GiX"), "memory", "cannot parse '8GiX'"),
    (dict(memory=-5), "memory", "must be"),
    (dict(bandwidth="fast"), "bandwidth", "cannot parse"),
    (dict(algorithm="best"), "algorithm", "valid: madpipe, contiguous"),
    (dict(remat="always"), "remat", "valid: none, rotor"),
    (dict(offload="host"), "offload", "give host_bandwidth"),
    (dict(time_limit=0), "time_limit", "must be > 0"),
    (dict(split_backward="sometimes"), "split_backward", "valid: auto, off"),
])
def test_bad_keywords_name_the_keyword(resnet50, keywords, field, words):
    with pytest.raises(madpipe.Error) as error:
        madpipe.plan(resnet50, **{**PLATFORM, **keywords})
    assert error.value.field == field
    assert words in str(error.value)


def test_bad_profiles_name_file_and_field(tmp_path, resnet50):
    data = json.loads(resnet50.read_text())
    data["layers"][3]["forward_ms"] = -1.5
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    with pytest.raises(madpipe.Error) as error:
        madpipe.plan(path, **PLATFORM)
    assert str(error.value) == f"{path}: /layers/3/forward_ms: must be a finite number >= 0, got -1.5"
    assert (error.value.file, error.value.field) == (str(path), "/layers/3/forward_ms")
    with pytest.raises(madpipe.Error) as missing:
        madpipe.read_profile(tmp_path / "absent.json")
    assert missing.value.kind == "io" and "absent.json" in str(missing.value)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(madpipe.Error, match="broken.json"):
        madpipe.read_profile(tmp_path / "broken.json")


def test_numbers_mean_bytes_and_bytes_per_second(resnet50):
    from_text = madpipe.plan(resnet50, gpus=4, memory="8GiB", bandwidth="12GB/s", time_limit=None)
    from_numbers = madpipe.plan(resnet50, gpus=4, memory=8 << 30, bandwidth=12e9, time_limit=None)
    assert from_text == from_numbers


def test_rematerialization_fits_where_plain_plans_do_not(resnet50):
    memory = "4GiB"
    with pytest.raises(madpipe.Error):
        madpipe.plan(resnet50, gpus=4, memory=memory, bandwidth="12GB/s")
    plan = madpipe.plan(resnet50, gpus=4, memory=memory, bandwidth="12GB/s", remat="rotor")
    assert any(stage["remat"] != "none" for stage in plan.stages)
    assert madpipe.validate(plan, resnet50) == []


def test_smallest_feasible_memory_is_where_plans_start(resnet50):
    options = dict(gpus=4, bandwidth="12GB/s", algorithm="contiguous")
    floor = madpipe.smallest_feasible_memory(resnet50, **options)
    assert floor > 0
    assert madpipe.plan(resnet50, memory=floor, **options).period_ms > 0
    with pytest.raises(madpipe.Error):
        madpipe.plan(resnet50, memory=int(floor * 0.95), **options)


def test_compare_rows_follow_the_algorithms(resnet50):
    rows = madpipe.compare(resnet50, algorithms=("madpipe", "contiguous", "gpipe"), gpus=4,
                           memory="12GiB", bandwidth="12GB/s")
    assert [row.algorithm for row in rows] == ["madpipe", "contiguous", "gpipe"]
    feasible = [row for row in rows if row.feasible]
    assert feasible and min(row.ratio_to_best for row in feasible) == 1.0
    madpipe_row, contiguous_row = rows[0], rows[1]
    assert madpipe_row.period_ms <= contiguous_row.period_ms * (1 + 1e-9)
    for row in feasible:
        assert row.ratio_to_lower_bound >= 1.0
        assert madpipe.validate(row.plan) == []
    tight = madpipe.compare(resnet50, algorithms=["gpipe"], gpus=4, memory="4GiB", bandwidth="12GB/s")
    assert not tight[0].feasible and tight[0].reason


def test_plans_and_profiles_round_trip_through_files(resnet50, tmp_path):
    plan = madpipe.plan(resnet50, **PLATFORM)
    plan.save(tmp_path / "plan.json")
    assert madpipe.read_plan(tmp_path / "plan.json") == plan
    profile = madpipe.read_profile(resnet50)
    profile.save(tmp_path / "profile.json")
    assert madpipe.read_profile(tmp_path / "profile.json") == profile
    assert len(profile) == 21 and profile.name == "resnet50"


def test_progress_lines_reach_the_callback(resnet50):
    lines = []
    madpipe.plan(resnet50, **PLATFORM, verbose=True, progress=lines.append)
    assert lines and all(isinstance(line, str) for line in lines)


def test_progress_lines_go_to_a_logger_or_the_madpipe_logger(resnet50, caplog):
    lines = []  # without a time limit, both requests take the same steps on a busy machine too
    madpipe.plan(resnet50, **PLATFORM, verbose=True, time_limit=None, progress=lines.append)
    caplog.set_level(logging.INFO, logger="madpipe")
    madpipe.plan(resnet50, **PLATFORM, verbose=True, time_limit=None)
    seconds = re.compile(r"\b\d+(\.\d+)? s\b")  # how long a step took varies between runs
    assert ([seconds.sub("t s", r.getMessage()) for r in caplog.records if r.name == "madpipe"]
            == [seconds.sub("t s", line) for line in lines])
    assert {r.levelno for r in caplog.records} == {logging.INFO}
    caplog.clear()
    mine = logging.getLogger("my.application")
    caplog.set_level(logging.INFO, logger="my.application")
    madpipe.compare(resnet50, **PLATFORM, algorithms=["contiguous"], verbose=True, progress=mine)
    assert caplog.records and all(r.name == "my.application" for r in caplog.records)
    with pytest.raises(madpipe.Error, match="progress: expected a callable"):
        madpipe.plan(resnet50, **PLATFORM, progress="stderr")


def test_the_search_for_what_fits_is_announced(resnet50):
    lines = []
    with pytest.raises(madpipe.NoPlanFits):
        madpipe.plan(resnet50, gpus=4, memory="1GiB", bandwidth="12GB/s", progress=lines.append)
    assert "no madpipe plan fits in 1.0 GiB per GPU; searching for what would fit" in lines


def split_profile(path):
    """The profile with half of each weighted layer's backward deferred to W."""
    data = madpipe.read_profile(path).to_dict()
    for layer in data["layers"]:
        if layer["weight_bytes"] > 0 and layer["backward_ms"] > 0:
            layer["backward_weight_ms"] = layer["backward_ms"] / 2
            layer["backward_input_ms"] = layer["backward_ms"] - layer["backward_weight_ms"]
            layer["backward_weight_kept_bytes"] = layer["output_bytes"]
    return madpipe.Profile(data)


def test_split_backward_auto_keeps_the_shorter_period(resnet50):
    profile = split_profile(resnet50)
    tight = dict(gpus=4, memory="10.3GiB", bandwidth="12GB/s")
    auto = madpipe.plan(profile, **tight)
    whole = madpipe.plan(profile, **tight, split_backward="off")
    assert auto.period_ms < whole.period_ms
    kinds = {op["kind"] for op in auto.to_dict()["pattern"]["ops"]}
    assert "W" in kinds
    assert "W" not in {op["kind"] for op in whole.to_dict()["pattern"]["ops"]}
    assert any("split backward (B and W)" in note for note in auto.notes)
    assert madpipe.validate(auto, profile) == []
    rows = madpipe.compare(profile, **tight, algorithms=("zb-h1", "zb-v", "interleaved"))
    assert [row.algorithm for row in rows] == ["zb-h1", "zb-v", "interleaved"]
    assert all(row.period_ms is None or auto.period_ms <= row.period_ms * (1 + 1e-9)
               for row in rows)
