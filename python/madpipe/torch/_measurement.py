"""How profile() measures one layer: its time, what autograd saves, and its transient memory."""

import contextlib
import statistics
import time

import torch


def tensor_bytes(tensor):
    """Bytes of a tensor's elements (0 for None)."""
    return 0 if tensor is None else tensor.numel() * tensor.element_size()


def _storage_key(tensor):
    """(address, bytes) of the storage behind a tensor, shared by all its views."""
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class SavedTensorCounter:
    """Records the distinct storages autograd saves for backward while active.

    Use as a context manager around a forward; ``saved_bytes(excluded)`` is the sum of the
    distinct storages saved, leaving out those of the ``excluded`` tensors (the layer's input,
    output, parameters and buffers, which madpipe counts elsewhere).
    """

    def __init__(self):
        self._storages = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda packed: packed)

    def _pack(self, tensor):
        if tensor.layout == torch.strided and tensor.device.type != "meta":
            address, size = _storage_key(tensor)
            if size > 0:
                self._storages[address] = max(size, self._storages.get(address, 0))
        return tensor

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)

    def saved_bytes(self, excluded):
        excluded_addresses = {_storage_key(t)[0] for t in excluded if t is not None}
        return sum(size for address, size in self._storages.items()
                   if address not in excluded_addresses)


class Stopwatch:
    """Times regions of work on a device: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def synchronize(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def measure(self, durations):
        """Appends the milliseconds the block took on the device to ``durations``."""
        if self.cuda:
            stream = torch.cuda.current_stream(self.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            yield
            end.record(stream)
            end.synchronize()
            durations.append(start.elapsed_time(end))
        else:
            start = time.perf_counter()
            yield
            durations.append((time.perf_counter() - start) * 1e3)


def median(values):
    return float(statistics.median(values)) if values else 0.0


class CudaMemoryMeter:
    """Allocated bytes and their peak on a CUDA device (the caching allocator's counters)."""

    def __init__(self, device):
        self.device = torch.device(device)

    def current(self):
        torch.cuda.synchronize(self.device)
        return torch.cuda.memory_allocated(self.device)

    def reset_peak(self):
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self):
        torch.cuda.synchronize(self.device)
        return torch.cuda.max_memory_allocated(self.device)


def library_workspace_bytes(device, dtype):
    """What the CUDA libraries keep allocated from their first product on (cuBLAS workspaces).

    Every later operation runs with it allocated, so it belongs to each layer's transient memory.
    0 on the CPU.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    meter = CudaMemoryMeter(device)
    before = meter.current()
    x = torch.ones(64, 64, device=device, dtype=dtype, requires_grad=True)
    w = torch.ones(64, 64, device=device, dtype=dtype, requires_grad=True)
    b = torch.ones(64, device=device, dtype=dtype, requires_grad=True)
    torch.nn.functional.linear(x, w, b).sum().backward()
    torch.matmul(x, w).sum().backward()
    del x, w, b
    return max(0, meter.current() - before)
