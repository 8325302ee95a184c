"""The torch.distributed.pipelining legs of bench/peers: one schedule, one process per rank.

    mpirun -np R python torch_schedules.py --schedule 1f1b --data train.bin --result r.json
    torchrun --nproc-per-node R torch_schedules.py --schedule 1f1b ...

Trains examples/gpt_from_pytorch/model.py's GPT (built with the same seed, so with the same
initial weights as the model.pt that `madpipe train --model script` reads) on windows of
train.bin, with ScheduleGPipe, Schedule1F1B (one stage per rank) or ScheduleInterleaved1F1B
(--stages-per-rank stages per rank, placed round robin: stage s on rank s % R), backend gloo on
the CPU, one thread per rank, AdamW (no weight decay) as madpipe's. The chain is split as
torchtitan splits a language model (generate_llm_fqn_per_model_part): the embedding counts as one
layer, the final norm and the head together as one, and the stages get the layers evenly, the
first ones one more where they do not divide.

Steps 1..--warmup warm up; the ranks meet at a barrier after the last warm-up step and after the
last step, and rank 0 writes --result (JSON): samples/s over the --steps steps in between, the
per-step times it saw, each rank's CPU time over the measured steps as a fraction of their wall
time (main thread, whole process), the first and last losses (from the rank of the last stage).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "gpt_from_pytorch"))
import model as gpt  # noqa: E402  examples/gpt_from_pytorch/model.py

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def split_chain(layers, num_stages):
    """Names of the chain's children in each stage, as torchtitan's
    generate_llm_fqn_per_model_part(num_stages, layers, input_weight=1, output_weight=1)."""
    units = layers + 2  # embed, the blocks, norm + head
    if num_stages > units:
        raise ValueError(f"{num_stages} stages need at least {num_stages - 2} blocks "
                         f"(--layers is {layers})")
    per_stage, extra = divmod(units, num_stages)
    stages, block = [], 0
    for s in range(num_stages):
        count = per_stage + (1 if s < extra else 0)
        names = []
        if s == 0:
            names.append("embed")
            count -= 1
        last = s == num_stages - 1
        if last:
            count -= 1
        names += [f"block{block + i}" for i in range(count)]
        block += count
        if last:
            names += ["norm", "head"]
        stages.append(names)
    assert block == layers, (stages, layers)
    return stages


def rank_and_size():
    """From torchrun (RANK), Open MPI's mpirun or an MPICH-style launcher."""
    for rank, size in (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                       ("PMI_RANK", "PMI_SIZE")):
        if rank in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def batches(path, context, samples, seed):
    """Step t's batch: `samples` windows of context + 1 tokens of the token file at offsets
    drawn from (seed, t); inputs and targets (the inputs shifted by one)."""
    tokens = np.memmap(path, dtype=np.uint16, mode="r")

    def batch(step):
        rng = np.random.default_rng([seed, step])
        offsets = rng.integers(0, len(tokens) - context - 1, size=samples)
        windows = np.stack([tokens[o:o + context + 1] for o in offsets]).astype(np.int64)
        windows = torch.from_numpy(windows)
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()

    return batch


def loss_fn(logits, targets):
    """madpipe's cross-entropy: logits over the last dimension against the next tokens."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def add_common_arguments(parser):
    gpt.add_arguments(parser)
    parser.add_argument("--data", required=True, help="token file (uint16), prepare.py's train.bin")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="measured steps after the warm-up")
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--rendezvous", default="",
                        help="init_method of the process group (default: env:// under torchrun, "
                             "else a file next to --result)")
    parser.add_argument("--result", default="", help="JSON file rank 0 writes")


def start(args):
    """One thread, the gloo process group; returns (rank, world size)."""
    torch.set_num_threads(args.threads)
    rank, world = rank_and_size()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    init = args.rendezvous or ("env://" if "MASTER_ADDR" in os.environ else
                               "file://" + os.path.abspath(args.result or "bench") + ".rendezvous")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    return rank, world


def train(args, schedule, modules, first_rank, last_rank, loss_rank, about):
    """--warmup + --steps steps of `schedule` with AdamW over the parameters of `modules`; rank 0
    prints and writes the result (`about` goes into it)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    parameters = [p for m in modules for p in m.parameters()]
    # A rank that a madpipe plan leaves idle holds no parameter, and no optimizer.
    optimizer = (torch.optim.AdamW(parameters, lr=args.learning_rate, weight_decay=0.0)
                 if parameters else None)
    samples = args.micro_batches * args.micro_batch_size
    batch = batches(args.data, args.context, samples, args.seed)
    losses, step_seconds = [], []
    total = args.warmup + args.steps
    dist.barrier()
    started, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
    for step in range(1, total + 1):
        begin = time.perf_counter()
        if optimizer:
            optimizer.zero_grad(set_to_none=False)
        inputs, targets = batch(step) if (first_rank or last_rank) else (None, None)
        step_losses = [] if last_rank else None
        if first_rank:
            schedule.step(inputs, target=targets if last_rank else None, losses=step_losses,
                          return_outputs=False)
        elif last_rank:
            schedule.step(target=targets, losses=step_losses, return_outputs=False)
        else:
            schedule.step(return_outputs=False)
        if optimizer:
            optimizer.step()
        step_seconds.append(time.perf_counter() - begin)
        if last_rank:
            losses.append(float(torch.stack([x.detach() for x in step_losses]).mean()))
        if step == args.warmup:
            dist.barrier()
            started = time.perf_counter()
            cpu, thread = time.process_time(), time.thread_time()
    dist.barrier()
    seconds = time.perf_counter() - started
    # The CPU time of each rank over the measured steps: its main thread (compute, Python, the
    # schedule's bookkeeping) and the whole process (gloo's threads as well).
    cpu_seconds = [None] * world
    dist.all_gather_object(cpu_seconds, [time.thread_time() - thread, time.process_time() - cpu])

    box = [losses]  # from the rank of the last stage to rank 0
    dist.broadcast_object_list(box, src=loss_rank)
    losses = box[0]
    if rank == 0:
        result = dict(about)
        result.update({
            "ranks": world, "threads": torch.get_num_threads(), "steps": args.steps,
            "warmup": args.warmup, "samples_per_step": samples, "seconds": seconds,
            "samples_per_s": args.steps * samples / seconds, "step_seconds_rank0": step_seconds,
            "main_thread_cpu_fraction": [c[0] / seconds for c in cpu_seconds],
            "process_cpu_fraction": [c[1] / seconds for c in cpu_seconds],
            "first_loss": losses[0], "last_loss": losses[-1], "losses": losses,
        })
        print(f"{about['system']} on {world} ranks: {result['samples_per_s']:.1f} samples/s over "
              f"steps {args.warmup + 1}..{total}; loss {losses[0]:.4f} -> {losses[-1]:.4f}",
              flush=True)
        if args.result:
            with open(args.result, "w") as f:
                json.dump(result, f, indent=1)
    dist.destroy_process_group()


def main():
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--schedule", choices=SCHEDULES, required=True)
    parser.add_argument("--stages-per-rank", type=int, default=0,
                        help="0: 1, or 2 for interleaved")
    args = parser.parse_args()
    rank, world = rank_and_size()
    per_rank = args.stages_per_rank or (2 if args.schedule == "interleaved" else 1)
    num_stages = per_rank * world
    try:
        if args.schedule != "interleaved" and per_rank != 1:
            raise ValueError(f"{args.schedule} runs one stage per rank")
        parts = split_chain(args.layers, num_stages)
    except ValueError as e:  # every rank stops; rank 0 says why
        raise SystemExit(str(e) if rank == 0 else 2)
    start(args)
    children = dict(gpt.from_arguments(args).named_children())  # model.py's seed and weights
    mine = [s for s in range(num_stages) if s % world == rank]
    device = torch.device("cpu")
    modules = [nn.Sequential(*[children[n] for n in parts[s]]) for s in mine]
    del children
    stages = [PipelineStage(m, s, num_stages, device) for m, s in zip(modules, mine)]
    if args.schedule == "interleaved":
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=args.micro_batches,
                                           loss_fn=loss_fn)
    else:
        kind = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
        schedule = kind(stages[0], n_microbatches=args.micro_batches, loss_fn=loss_fn)
    train(args, schedule, modules, 0 in mine, num_stages - 1 in mine, (num_stages - 1) % world,
          {"system": f"torch {args.schedule}", "stages": num_stages, "split": parts})


if __name__ == "__main__":
    main()
