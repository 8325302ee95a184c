"""madpipe.export_torch: the plan's order per rank, the same files as `madpipe export`."""

import subprocess

import pytest

import madpipe


@pytest.fixture
def tight_plan(non_contiguous_profile):
    """A plan with two stages on one GPU."""
    plan = madpipe.plan(non_contiguous_profile, gpus=2, memory="1GiB", bandwidth="12GB/s", time_limit=None)
    assert not plan.is_contiguous
    return plan


@pytest.mark.parametrize("gpus", [2, 4])
def test_contiguous_plans_export_too(resnet50, gpus):
    plan = madpipe.plan(resnet50, gpus=gpus, memory="16GiB", bandwidth="12GB/s")
    export = madpipe.export_torch(plan, 8)
    assert len(export.actions) == gpus
    assert sum(len(row) for row in export.actions) == 2 * 8 * len(plan.stages)


def test_every_stage_runs_each_micro_batch_once_on_its_rank(tight_plan):
    export = madpipe.export_torch(tight_plan, 6)
    assert len(export.actions) == 2
    assert export.stage_to_rank == [stage["gpu"] for stage in tight_plan.stages]
    for stage, rank in enumerate(export.stage_to_rank):
        for op in "FB":
            tokens = [f"{stage}{op}{mb}" for mb in range(6)]
            for other_rank, row in enumerate(export.actions):
                count = sum(row.count(token) for token in tokens)
                assert count == (6 if other_rank == rank else 0)
        row = export.actions[rank]
        for mb in range(6):
            assert row.index(f"{stage}F{mb}") < row.index(f"{stage}B{mb}")
    stages = export.stages
    assert stages["format"] == "madpipe.torch-stages/1"
    assert stages["micro_batches"] == 6 and stages["num_stages"] == len(tight_plan.stages)
    assert [(s["first_layer"], s["last_layer"]) for s in stages["stages"]] == \
        [(s["first_layer"], s["last_layer"]) for s in tight_plan.stages]
    assert export.csv.splitlines() == [",".join(row) for row in export.actions]


def test_python_and_command_line_write_the_same_files(tight_plan, madpipe_bin, tmp_path):
    tight_plan.save(tmp_path / "plan.json")
    subprocess.run([madpipe_bin, "export", "--plan", str(tmp_path / "plan.json"), "--format", "torch",
                    "--micro-batches", "5", "--output", str(tmp_path / "cli")], check=True, capture_output=True)
    madpipe.export_torch(tight_plan, 5).write(tmp_path / "python")
    for name in ("schedule.csv", "stages.json"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "python" / name).read_bytes()
    assert madpipe.read_torch_schedule(tmp_path / "cli") == madpipe.export_torch(tight_plan, 5)


def test_bad_exports_are_refused(tight_plan):
    with pytest.raises(madpipe.Error, match="micro"):
        madpipe.export_torch(tight_plan, 0)
    broken = tight_plan.to_dict()
    broken["stages"][0]["gpu"] = 9
    with pytest.raises(madpipe.Error):
        madpipe.export_torch(broken, 4)
