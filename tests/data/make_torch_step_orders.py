"""Writes torch_step_orders.json: the per-rank orders of torch.distributed.pipelining's
ScheduleInterleaved1F1B (two chunks per rank) and ScheduleZBVZeroBubble, spelled as madpipe's
step orders ("F2.7": forward of stage 2 for micro-batch 7; B the input gradient, W the weight
gradient), one string per rank. tests/schedule/step_order_test.cpp checks madpipe's generators against it.

    .venv/bin/python tests/data/make_torch_step_orders.py
"""

import json
import pathlib
import types

from torch.distributed.pipelining import schedules

KIND = {
    schedules._ComputationType.FORWARD: "F",
    schedules._ComputationType.FULL_BACKWARD: "B",
    schedules._ComputationType.BACKWARD_INPUT: "B",
    schedules._ComputationType.BACKWARD_WEIGHT: "W",
}


def spelled(actions):
    return " ".join(f"{KIND[a.computation_type]}{a.stage_index}.{a.microbatch_index}"
                    for a in actions if a is not None)


def zb_v(gpus, micro_batches):
    schedule = types.SimpleNamespace(pp_group_size=gpus, num_stages=2 * gpus,
                                     _n_microbatches=micro_batches)
    return [spelled(schedules.ScheduleZBVZeroBubble._calculate_single_rank_operations(schedule, r))
            for r in range(gpus)]


def interleaved(gpus, micro_batches, chunks=2):
    rounds = max(1, micro_batches // gpus)
    schedule = types.SimpleNamespace(pp_group_size=gpus, n_local_stages=chunks,
                                     _n_microbatches=micro_batches, number_of_rounds=rounds,
                                     microbatches_per_round=micro_batches // rounds)
    return [spelled(schedules.ScheduleInterleaved1F1B._calculate_single_rank_operations(
        schedule, r)) for r in range(gpus)]


def main():
    cases = {"zb-v": {}, "interleaved": {}}
    for gpus in (2, 3, 4, 8):
        for m in sorted({1, gpus, 2 * gpus - 1, 2 * gpus, 4 * gpus}):
            cases["zb-v"][f"{gpus} {m}"] = zb_v(gpus, m)
        for m in sorted({gpus, gpus + 2, 2 * gpus, 4 * gpus}):
            if m % max(1, m // gpus) == 0:
                cases["interleaved"][f"{gpus} {m}"] = interleaved(gpus, m)
    path = pathlib.Path(__file__).with_name("torch_step_orders.json")
    path.write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
