"""plan(): a PyTorch chain profiled and planned in one call."""

from .. import _planning
from .._documents import Profile
from .profiling import profile as measure


def plan(chain, sample, *, gpus, memory, bandwidth, device="cpu", loss_fn=None, target=None,
         dtype=None, warmup=2, repeats=10, name=None, **planning):
    """Measures ``chain`` on the micro-batch ``sample`` (``madpipe.torch.profile``) and plans it
    (``madpipe.plan``) on ``gpus`` GPUs of ``memory`` linked at ``bandwidth``.

    ``device``, ``loss_fn``, ``target``, ``dtype``, ``warmup``, ``repeats`` and ``name`` are
    ``profile``'s; every other keyword is ``madpipe.plan``'s (``remat``, ``micro_batches``,
    ``time_limit``, ``progress``...). The plan is for micro-batches of ``sample``'s size.

    Returns:
        the ``madpipe.Plan``, whose ``profile`` attribute holds the measured ``madpipe.Profile``
        (``run_plan(..., profile=plan.profile)`` then checks the micro-batch size).
    """
    measured = Profile(measure(chain, sample, device, name=name, warmup=warmup, repeats=repeats,
                               dtype=dtype, loss_fn=loss_fn, target=target))
    result = _planning.plan(measured, gpus=gpus, memory=memory, bandwidth=bandwidth, **planning)
    result.profile = measured
    return result
