"""Small chains and a multi-rank harness for the madpipe.torch tests.

The spawned ranks of ``run_ranks`` import this module, so everything they run lives here:
``train_and_compare`` trains a chain with ``madpipe.torch.run_plan`` on gloo CPU ranks and
trains an unsplit copy on every rank with gradient accumulation over the same micro-batches,
then writes how far apart the two are to ``<result_dir>/rank<r>.json``.
"""

import copy
import datetime
import importlib.util
import json
import pathlib

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

REPO = pathlib.Path(__file__).resolve().parents[2]
GPT_EXAMPLE = REPO / "examples" / "gpt_from_pytorch" / "model.py"


def mlp(layers=3, width=8, seed=0, dtype=torch.float64):
    """A chain of ``layers`` children, each Linear(width, width) then tanh."""
    torch.manual_seed(seed)
    chain = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh())
                                  for _ in range(layers)])
    return chain.to(dtype)


def gpt(layers=2, vocab=32, context=8, width=16, heads=2, seed=0, dtype=torch.float32):
    """examples/gpt_from_pytorch's GPT chain: embed, ``layers`` blocks, norm, head."""
    spec = importlib.util.spec_from_file_location("gpt_from_pytorch_model", GPT_EXAMPLE)
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    return model.build(vocab=vocab, context=context, width=width, heads=heads, layers=layers,
                       seed=seed).to(dtype)


class PatchEmbedding(torch.nn.Module):
    """A vision transformer's patch embedding: it returns a non-contiguous tensor."""

    def __init__(self, width, patch=4):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, width, patch, patch)

    def forward(self, images):
        return self.conv(images).flatten(2).transpose(1, 2)


class ViewBlock(torch.nn.Module):
    """A block whose output is a view of what it computed."""

    def __init__(self, width):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.linear(x)).transpose(1, 2).transpose(1, 2)


class PoolHead(torch.nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.head = torch.nn.Linear(width, classes)

    def forward(self, x):
        return self.head(x.mean(1))


def vit(layers=2, width=8, classes=4, seed=0, dtype=torch.float64):
    """A small vision transformer-like chain whose layers return views and non-contiguous
    tensors: patch embedding, ``layers`` blocks, pooled head (images 3x8x8)."""
    torch.manual_seed(seed)
    blocks = [ViewBlock(width) for _ in range(layers)]
    return torch.nn.Sequential(PatchEmbedding(width), *blocks, PoolHead(width, classes)).to(dtype)


def gpt_loss(logits, target):
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def mse_loss(output, target):
    return F.mse_loss(output, target)


CHAINS = {"mlp": (mlp, mse_loss), "gpt": (gpt, gpt_loss), "vit": (vit, mse_loss)}


def batch(kind, options, step, size):
    """The inputs and targets of one step, the same on every rank."""
    generator = torch.Generator().manual_seed(1000 + step)
    if kind == "gpt":
        vocab, context = options.get("vocab", 32), options.get("context", 8)
        ids = torch.randint(vocab, (size, context + 1), generator=generator)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    if kind == "vit":
        dtype = options.get("dtype", torch.float64)
        return (torch.randn(size, 3, 8, 8, generator=generator, dtype=dtype),
                torch.randn(size, options.get("classes", 4), generator=generator, dtype=dtype))
    width, dtype = options.get("width", 8), options.get("dtype", torch.float64)
    return (torch.randn(size, width, generator=generator, dtype=dtype),
            torch.randn(size, width, generator=generator, dtype=dtype))


def relative_difference(a, b):
    scale = max(b.abs().max().item(), 1e-30)
    return (a - b).abs().max().item() / scale


def _train_reference(reference, loss_fn, inputs, target, micro_batches, optimizer):
    """Unsplit training of one step: gradient accumulation, gradients divided by micro_batches."""
    optimizer.zero_grad()
    losses = []
    for x, t in zip(inputs.chunk(micro_batches), target.chunk(micro_batches)):
        loss = loss_fn(reference(x), t)
        loss.backward()
        losses.append(loss.detach())
    for parameter in reference.parameters():
        parameter.grad.div_(micro_batches)
    optimizer.step()
    return losses


def train_and_compare(rank, world_size, init_file, result_dir, case):
    """One rank: run_plan training against unsplit training; writes rank<r>.json."""
    import madpipe.torch as mt

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=120))
    try:
        build, loss_fn = CHAINS[case["chain"]]
        options = case.get("options", {})
        chain = build(**options)
        reference = copy.deepcopy(chain)
        initial = copy.deepcopy(chain)
        runner = mt.run_plan(chain, case["export"], loss_fn=loss_fn, profile=case.get("profile"),
                             plan=case.get("plan"))
        parameters = list(runner.parameters())
        optimizer = torch.optim.SGD(parameters, lr=case["lr"]) if parameters else None
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=case["lr"])
        loss_difference = 0.0
        for step in range(case["steps"]):
            inputs, target = batch(case["chain"], options, step, case["batch"])
            if optimizer:
                optimizer.zero_grad()
            losses = runner.step(inputs, target)
            if optimizer:
                optimizer.step()
            expected = _train_reference(reference, loss_fn, inputs, target, runner.micro_batches,
                                        reference_optimizer)
            if runner.holds_last:
                assert len(losses) == len(expected), (losses, expected)
                loss_difference = max([loss_difference] + [
                    relative_difference(a, b) for a, b in zip(losses, expected)])
        layers, weight_difference, moved = [], 0.0, 0.0
        stage_layers = {s.stage: s for s in mt.read_export(case["export"]).stages}
        for index in runner.stage_indices:
            spec = stage_layers[index]
            for layer in range(spec.first_layer, spec.last_layer + 1):
                layers.append(layer)
                for trained, unsplit, start in zip(chain[layer].parameters(),
                                                   reference[layer].parameters(),
                                                   initial[layer].parameters()):
                    weight_difference = max(weight_difference, relative_difference(trained, unsplit))
                    moved = max(moved, relative_difference(trained.detach(), start))
        result = {"rank": rank, "stages": runner.stage_indices, "layers": layers,
                  "holds_last": runner.holds_last, "weight_difference": weight_difference,
                  "loss_difference": loss_difference, "moved": moved, "report": runner.report()}
        gathered = mt.gather_state_dict(runner)
        if gathered is not None:  # rank 0: the whole chain under its own keys
            expected = reference.state_dict()
            result["gathered_keys"] = list(gathered) == list(expected)
            result["gathered_difference"] = max(relative_difference(gathered[key], expected[key])
                                                for key in expected)
        if "wrong_batch" in case:
            inputs, target = batch(case["chain"], options, 0, case["wrong_batch"])
            try:
                runner.step(inputs, target)
                result["wrong_batch_error"] = None
            except ValueError as error:
                result["wrong_batch_error"] = str(error)
        pathlib.Path(result_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def run_ranks(world_size, tmp_path, case):
    """Runs train_and_compare on world_size spawned gloo ranks; returns their results by rank."""
    result_dir = tmp_path / "results"
    result_dir.mkdir()
    mp.spawn(train_and_compare, args=(world_size, str(tmp_path / "rendezvous"), str(result_dir), case),
             nprocs=world_size, join=True)
    return [json.loads((result_dir / f"rank{rank}.json").read_text()) for rank in range(world_size)]
