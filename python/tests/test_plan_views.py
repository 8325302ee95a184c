"""Plan.summary(), stage_table(), gpu_table() and to_svg() against the command line; short reprs."""

import json
import subprocess
import xml.etree.ElementTree as ElementTree

import pytest

import madpipe

PLATFORM = dict(gpus=4, memory="8GiB", bandwidth="12GB/s")


def command_summary(madpipe_bin, profile, keywords):
    """What `madpipe plan` prints with the keywords as options."""
    options = []
    for keyword, value in keywords.items():
        options += ["--" + keyword.replace("_", "-"), str(value)]
    command = subprocess.run([madpipe_bin, "plan", "--profile", str(profile), "--quiet", *options],
                             check=True, capture_output=True, text=True)
    return command.stdout


def without_run_lines(text):
    """The summary without what differs between two runs (planning time) or is the command's own."""
    return [line for line in text.splitlines() if not line.startswith(("planned in", "note ", "solver "))]


@pytest.mark.parametrize("keywords", [
    dict(PLATFORM),
    dict(gpus=4, memory="4GiB", bandwidth="12GB/s", remat="rotor"),  # the "saves memory by" column
    dict(gpus=8, memory="8GiB", bandwidth="12GB/s", gpus_per_node=4, inter_node_bandwidth="5GB/s"),
    dict(gpus=4, memory="12GiB", bandwidth="12GB/s", algorithm="1f1b", micro_batches=8),  # the step line
])
def test_summary_is_what_the_command_prints(resnet50, madpipe_bin, keywords):
    planned = madpipe.plan(resnet50, **keywords, time_limit=1e9)
    printed = command_summary(madpipe_bin, resnet50, {**keywords, "time_limit": 1e9})
    assert without_run_lines(planned.summary()) == without_run_lines(printed)
    assert f"planned in   {planned.planning_seconds:.2f} s" in planned.summary()


def test_summary_of_a_plan_read_from_a_file_has_no_layer_names(resnet50, tmp_path):
    planned = madpipe.plan(resnet50, **PLATFORM)
    planned.save(tmp_path / "plan.json")
    loaded = madpipe.read_plan(tmp_path / "plan.json")
    assert loaded.profile is None and planned.profile == madpipe.read_profile(resnet50)
    text = loaded.summary()
    assert text.splitlines()[0] == "profile      resnet50"
    assert "names" not in text.splitlines()[4] and "conv1" not in text
    assert "planned in" not in text
    assert loaded.summary(resnet50).splitlines()[4:9] == planned.summary().splitlines()[4:9]


def test_stage_and_gpu_tables_hold_the_plan_and_its_memory(resnet50):
    planned = madpipe.plan(resnet50, gpus=4, memory="4GiB", bandwidth="12GB/s", remat="rotor")
    stages = planned.stage_table()
    assert [row["stage"] for row in stages] == [s["id"] for s in planned.stages]
    layer_names = [layer["name"] for layer in madpipe.read_profile(resnet50).layers]
    assert sum((row["layer_names"] for row in stages), []) == layer_names
    assert all(row["in_flight"] >= 1 for row in stages)
    assert any(row["remat"] == "rotor" for row in stages)
    gpus = planned.gpu_table()
    assert [row["memory_bytes"] for row in gpus] == planned.memory_bytes
    for row in gpus:
        parts = row["weight_bytes"] + row["activation_bytes"] + row["buffer_bytes"] + row["workspace_bytes"]
        assert parts == row["memory_bytes"]
        assert row["fraction_of_limit"] == pytest.approx(row["memory_bytes"] / (4 << 30))
    assert sorted(sum((row["stages"] for row in gpus), [])) == list(range(len(stages)))


def test_a_profile_too_short_for_the_plan_is_refused(resnet50, non_contiguous_profile):
    planned = madpipe.plan(resnet50, **PLATFORM)
    with pytest.raises(madpipe.Error, match="has 3 layers"):
        planned.summary(non_contiguous_profile)


def test_svg_is_the_chart_madpipe_show_draws(resnet50, madpipe_bin, tmp_path):
    planned = madpipe.plan(resnet50, **PLATFORM)
    planned.save(tmp_path / "plan.json")
    subprocess.run([madpipe_bin, "show", "--plan", str(tmp_path / "plan.json"), "--micro-batches", "6",
                    "--svg", str(tmp_path / "cli.svg")], check=True, capture_output=True)
    svg = planned.to_svg(tmp_path / "python.svg", micro_batches=6)
    assert (tmp_path / "python.svg").read_text() == svg == (tmp_path / "cli.svg").read_text()
    root = ElementTree.fromstring(svg)
    assert root.tag.endswith("svg") and len(root.findall(".//{*}rect")) > 4 * 6 * 2
    assert planned.to_svg() != svg  # 0 micro-batches: enough for the steady state, 16 here
    with pytest.raises(madpipe.Error, match="micro_batches"):
        planned.to_svg(micro_batches=-1)


def test_notebooks_show_the_summary_and_the_chart(resnet50):
    planned = madpipe.plan(resnet50, **PLATFORM)
    page = planned._repr_html_()
    assert page.count("<table>") == 2 and "conv1..maxpool" in page and "123.42 ms per micro-batch" in page
    assert page.endswith(planned._repr_svg_()) and planned._repr_svg_() == planned.to_svg()


def test_reprs_are_one_short_line(resnet50):
    planned = madpipe.plan(resnet50, **PLATFORM)
    simulation = madpipe.simulate(planned, micro_batches=8)
    peak = max(simulation.peak_memory_bytes)
    assert repr(simulation) == (
        f"Simulation(8 micro-batches, step {simulation.step_ms:.3f} ms, period {simulation.period_ms:.3f} "
        f"ms/micro-batch, peak 7.5 GiB on GPU {simulation.peak_memory_bytes.index(peak)}, "
        f"{len(simulation.ops)} ops)")
    assert repr(madpipe.export_torch(planned, 8)) == "TorchSchedule(8 micro-batches, 4 stages on 4 ranks, 64 actions)"
    rows = madpipe.compare(resnet50, **PLATFORM, algorithms=("madpipe", "gpipe"))
    assert repr(rows[0]) == (f"Comparison(madpipe: {rows[0].period_ms:.3f} ms per micro-batch, 1.000 x best, "
                             f"{rows[0].ratio_to_lower_bound:.3f} x lower bound)")
    assert repr(rows[1]) == f"Comparison(gpipe: {rows[1].reason})"
    assert all(len(repr(value)) < 200 for value in (planned, simulation, rows[0], madpipe.read_profile(resnet50)))
    assert json.loads(planned.to_json())["profile"] == "resnet50"
