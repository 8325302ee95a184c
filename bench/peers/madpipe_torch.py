"""The leg of bench/peers where torch.distributed.pipelining runs madpipe's plan.

    madpipe export --plan plan.json --format torch --micro-batches 8 --output export
    mpirun -np R python madpipe_torch.py --export export --data train.bin --result r.json

The plan is the one `madpipe train` made for these ranks (its stages may be non-contiguous and
several per rank); `madpipe.torch.run_plan` builds this rank's stages of examples/gpt_from_pytorch's
GPT (the same seed, so the same initial weights as model.pt) and a torch
_PipelineScheduleRuntime that runs each rank's forwards and backwards in the plan's order over
gloo. The training loop, the data, the optimizer and the measurement are those of
torch_schedules.py.
"""
import argparse

import torch_schedules as common


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_common_arguments(parser)
    parser.add_argument("--export", required=True,
                        help="folder written by madpipe export --format torch")
    args = parser.parse_args()
    from madpipe.torch import read_export, run_plan

    rank, world = common.start(args)
    export = read_export(args.export)
    if export.micro_batches != args.micro_batches:
        raise SystemExit(f"{args.export} is for {export.micro_batches} micro-batches a step, "
                         f"not --micro-batches {args.micro_batches}")
    chain = common.gpt.from_arguments(args)  # model.py's seed and weights
    runner = run_plan(chain, args.export, loss_fn=common.loss_fn)
    names = [name for name, _ in chain.named_children()]
    split = [[names[s.first_layer], names[s.last_layer], s.rank] for s in export.stages]
    loss_rank = export.stages[-1].rank
    train(args, runner, loss_rank, {"system": "madpipe plan in torch",
                                    "stages": len(export.stages), "split": split})


class _Schedule:
    """run_plan's runner behind the step() of a torch schedule, for common.train."""

    def __init__(self, runner):
        self.runner = runner

    def step(self, *args, target=None, losses=None, return_outputs=False):
        got = self.runner.step(args[0] if args else None, target)
        if losses is not None and got is not None:
            losses.extend(got)


def train(args, runner, loss_rank, about):
    common.train(args, _Schedule(runner), runner.modules, runner.holds_first, runner.holds_last,
                 loss_rank, about)


if __name__ == "__main__":
    main()
