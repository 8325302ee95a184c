"""torch.distributed.pipelining accepts the export of every plan: its schedule check
(_validate_schedule), its lowering to sends and receives (_add_send_recv, _add_wait_send) and its
dry run of the result (_simulate_comms_compute), through madpipe.torch.check_export.

Plans: every shipped profile and random chains, on 2 and 4 GPUs, with the madpipe, contiguous,
1F1B and GPipe planners, each at a loose memory and at a tight one (just above the smallest
memory the planner finds a plan for, where madpipe's allocations become non-contiguous), exported
for 1, P and 3P + 1 micro-batches."""

import json
import random
import subprocess

import pytest

import madpipe
import madpipe.torch as mt
from conftest import PROFILES

ALGORITHMS = ("madpipe", "contiguous", "1f1b", "gpipe")
GPUS = (2, 4)
BANDWIDTH = "12GB/s"


def random_profile(seed):
    """A madpipe.profile/1 chain of 3 to 12 layers with uneven times and sizes."""
    rng = random.Random(seed)
    mib = 2 ** 20
    return {
        "format": "madpipe.profile/1", "name": f"random{seed}", "input_bytes": rng.randint(1, 8) * mib,
        "layers": [{"name": f"layer{i}", "forward_ms": round(rng.uniform(0.1, 3), 3),
                    "backward_ms": round(rng.uniform(0.2, 6), 3),
                    "weight_bytes": rng.randint(1, 64) * mib, "output_bytes": rng.randint(1, 64) * mib,
                    "saved_bytes": rng.randint(0, 64) * mib}
                   for i in range(rng.randint(3, 12))],
    }


def plans(profile):
    """(label, plan) for every GPU count, algorithm and memory (tight, loose) that has a plan."""
    for gpus in GPUS:
        for algorithm in ALGORITHMS:
            smallest = madpipe.smallest_feasible_memory(profile, gpus=gpus, bandwidth=BANDWIDTH,
                                                        algorithm=algorithm)
            if smallest is None:
                continue
            for memory_name, memory in (("tight", int(smallest * 1.01) + 1), ("loose", 4 * smallest)):
                plan = madpipe.plan(profile, gpus=gpus, memory=memory, bandwidth=BANDWIDTH,
                                    algorithm=algorithm)
                yield f"{gpus} GPUs, {algorithm}, {memory_name}", plan


def check_every_export(profile, name):
    """Checks the exports of every plan of a profile; returns the counts for the report."""
    counts = {"plans": 0, "exports": 0, "accepted": 0, "non_contiguous": 0, "idle_ranks": 0}
    for label, plan in plans(profile):
        counts["plans"] += 1
        counts["non_contiguous"] += not plan.is_contiguous
        gpus = plan.platform["gpus"]
        for micro_batches in sorted({1, gpus, 3 * gpus + 1}):
            counts["exports"] += 1
            export = madpipe.export_torch(plan, micro_batches)
            try:
                mt.check_export(export)
            except mt.ExportError as error:
                pytest.fail(f"{name}, {label}, {micro_batches} micro-batches: {error}")
            counts["accepted"] += 1
            counts["idle_ranks"] += len(mt.read_export(export).active_ranks) < gpus
    print(f"\n{name}: torch accepted {counts['accepted']} of {counts['exports']} exports of "
          f"{counts['plans']} plans ({counts['non_contiguous']} non-contiguous plans, "
          f"{counts['idle_ranks']} exports with idle ranks)")
    return counts


@pytest.mark.parametrize("profile", sorted(PROFILES.glob("*.json")), ids=lambda path: path.stem)
def test_torch_accepts_the_exports_of_shipped_profiles(profile):
    counts = check_every_export(json.loads(profile.read_text()), profile.stem)
    assert counts["accepted"] == counts["exports"] > 0


def test_torch_accepts_the_exports_of_random_chains():
    totals = {}
    for seed in range(12):
        for key, value in check_every_export(random_profile(seed), f"random{seed}").items():
            totals[key] = totals.get(key, 0) + value
    print(f"random chains: torch accepted {totals['accepted']} of {totals['exports']} exports of "
          f"{totals['plans']} plans ({totals['non_contiguous']} non-contiguous)")
    assert totals["accepted"] == totals["exports"]
    assert totals["non_contiguous"] > 0  # the check covers non-contiguous placements


def test_the_command_s_export_reads_as_the_package_s(madpipe_bin, tmp_path, non_contiguous_profile):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(non_contiguous_profile))
    subprocess.run([madpipe_bin, "plan", "--profile", str(profile), "--gpus", "2", "--memory", "1GiB",
                    "--bandwidth", BANDWIDTH, "--quiet", "--output", str(tmp_path / "plan.json")],
                   check=True, capture_output=True)
    subprocess.run([madpipe_bin, "export", "--plan", str(tmp_path / "plan.json"), "--format", "torch",
                    "--micro-batches", "5", "--output", str(tmp_path / "export")],
                   check=True, capture_output=True)
    from_directory = mt.read_export(tmp_path / "export")
    from_package = mt.read_export(madpipe.export_torch(madpipe.read_plan(tmp_path / "plan.json"), 5))
    assert from_directory == from_package
    assert from_directory.stage_to_rank == [0, 1, 0]
    lowered = mt.check_export(tmp_path / "export")
    assert "0SEND_F0" in [str(action) for action in lowered[0]]


def two_stage_export(actions, **changes):
    document = {"format": "madpipe.torch-stages/1", "micro_batches": 2, "ranks": 2,
                "stages": [{"stage": 0, "rank": 0, "first_layer": 0, "last_layer": 0},
                           {"stage": 1, "rank": 1, "first_layer": 1, "last_layer": 1}],
                "actions": actions}
    document.update(changes)
    return document


GOOD_ACTIONS = [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]


SPLIT_ACTIONS = [["0F0", "0F1", "0I0", "0W0", "0I1", "0W1"], ["1F0", "1I0", "1F1", "1W0", "1I1", "1W1"]]


def test_a_well_formed_export_passes():
    mt.check_export(two_stage_export(GOOD_ACTIONS))
    mt.check_export(two_stage_export(SPLIT_ACTIONS))  # backwards split into I and W


@pytest.mark.parametrize("document, message", [
    (two_stage_export(GOOD_ACTIONS, format="madpipe.plan/1"), "'format' must be"),
    (two_stage_export([["0F0", "0X1"], []]), "not a compute action"),
    (two_stage_export([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1"]]), "misses 1 of its 8 actions: 1B1"),
    (two_stage_export([["0F0", "0F1", "0B0", "0B1"], ["1B0", "1F0", "1F1", "1B1"]]), "1B0 before its forward"),
    (two_stage_export([["0F0", "0F1", "0B0", "0B1", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]), "0B1 twice"),
    (two_stage_export([["1F0", "0F1", "0B0", "0B1"], ["0F0", "1B0", "1F1", "1B1"]]), "stage 1 is not one of its"),
    (two_stage_export([["0F0", "0F1", "0B0", "0B1"], ["1F1", "1F0", "1B0", "1B1"]]), "micro-batch order"),
    (two_stage_export(GOOD_ACTIONS, ranks=1), "2 rows for 1 ranks"),
    (two_stage_export([SPLIT_ACTIONS[0], ["1F0", "1W0", "1I0", "1F1", "1I1", "1W1"]]), "1W0 before its input gradient"),
    (two_stage_export([SPLIT_ACTIONS[0], ["1F0", "1B0", "1I0", "1F1", "1I1", "1W1"]]), "both 1B0 and 1I0"),
    (two_stage_export([SPLIT_ACTIONS[0], ["1F0", "1I0", "1F1", "1I1", "1W1"]]), "misses 1 of its 12 actions: 1W0"),
])
def test_malformed_exports_are_refused_with_the_reason(document, message):
    with pytest.raises(mt.ExportError, match=message):
        mt.check_export(document)


def test_a_schedule_that_deadlocks_is_refused():
    """Rank 0 runs stage 2 before stage 0, whose output stage 2 needs through rank 1."""
    document = {"format": "madpipe.torch-stages/1", "micro_batches": 1, "ranks": 2,
                "stages": [{"stage": 0, "rank": 0, "first_layer": 0, "last_layer": 0},
                           {"stage": 1, "rank": 1, "first_layer": 1, "last_layer": 1},
                           {"stage": 2, "rank": 0, "first_layer": 2, "last_layer": 2}],
                "actions": [["2F0", "0F0", "2B0", "0B0"], ["1F0", "1B0"]]}
    with pytest.raises(mt.ExportError, match="cannot run the schedule"):
        mt.check_export(document)


def test_a_missing_export_directory_names_the_file(tmp_path):
    with pytest.raises(mt.ExportError, match="stages.json: no such file"):
        mt.read_export(tmp_path)
