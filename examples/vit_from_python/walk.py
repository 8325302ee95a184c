"""docs/python.md's walk, end to end: an nn.Module to a plan and its chart, training with
madpipe.torch.run_plan on 2 gloo ranks and with the native runtime from Python, the trained
state_dict back, and the two mistakes madpipe catches (a non-contiguous stage output is handled;
a wrong micro-batch size is refused).

    PYTHONPATH=build/python MADPIPE_BIN=build/madpipe .venv/bin/python examples/vit_from_python/walk.py OUT_DIR
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import vit  # noqa: E402

import madpipe  # noqa: E402
import madpipe.torch as mt  # noqa: E402

MICRO_BATCH, MICRO_BATCHES, STEPS = 16, 4, 3


def data(steps, seed=1):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(steps * MICRO_BATCH * MICRO_BATCHES, 3, 32, 32, generator=generator)
    return images, torch.randint(10, (len(images),), generator=generator)


def rank_main(rank, out, plan_path, profile_path):
    """One gloo rank of the run_plan training."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    chain = vit()
    plan = madpipe.read_plan(plan_path)
    runner = mt.run_plan(chain, madpipe.export_torch(plan, MICRO_BATCHES), loss_fn=F.cross_entropy,
                         profile=profile_path, plan=plan)
    optimizer = torch.optim.AdamW(runner.parameters(), lr=1e-3)
    images, labels = data(STEPS)
    for step, (x, y) in enumerate(zip(images.split(MICRO_BATCH * MICRO_BATCHES),
                                      labels.split(MICRO_BATCH * MICRO_BATCHES))):
        optimizer.zero_grad()
        losses = runner.step(x, y)
        optimizer.step()
        if losses:
            print(f"step {step + 1}: loss {torch.stack(losses).mean():.4f}")
    report = runner.report()
    state = mt.gather_state_dict(runner)
    try:  # micro-batches of 8: another size than the profile's 16
        runner.step(images[:8 * MICRO_BATCHES], labels[:8 * MICRO_BATCHES])
    except ValueError as error:
        wrong_size = str(error)
    if rank == 0:
        print(report)
        print(f"gathered {len(state)} tensors; the chain's keys: {list(state) == list(vit().state_dict())}")
        print(f"wrong micro-batch size: {wrong_size}")
        torch.save(state, f"{out}/run_plan_state.pt")
    dist.destroy_process_group()


def main(out):
    os.makedirs(out, exist_ok=True)
    chain = vit()
    print(f"{sum(p.numel() for p in chain.parameters())} parameters in {len(chain)} layers")
    sample, target = torch.randn(MICRO_BATCH, 3, 32, 32), torch.randint(10, (MICRO_BATCH,))
    plan = mt.plan(chain, sample, loss_fn=F.cross_entropy, target=target, name="vit", gpus=2,
                   memory="40MiB", bandwidth="12GB/s", micro_batches=MICRO_BATCHES, time_limit=None)
    print(plan)
    print(plan.summary())
    plan.to_svg(f"{out}/vit-plan.svg")
    plan.save(f"{out}/plan.json")
    plan.profile.save(f"{out}/profile.json")

    print("--- run_plan on 2 gloo ranks")
    mp.spawn(rank_main, args=(out, f"{out}/plan.json", f"{out}/profile.json"), nprocs=2, join=True)

    print("--- the native runtime from Python")
    images, labels = data(20)
    run = mt.train(vit(), images, labels, gpus=2, output_dir=f"{out}/native", loss="cross-entropy",
                   steps=STEPS, micro_batches=MICRO_BATCHES, micro_batch_size=MICRO_BATCH,
                   memory="40MiB", eval_every=0, trace_steps=0)
    print(run)
    print(run.metrics[-1])
    model = vit()
    model.load_state_dict(run.state_dict)
    print("loaded the native run's state_dict into the nn.Sequential")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "vit-walk")
