# peer_common.py — what bench/'s two peer drivers (peer_scan.py, peer_train_step.py)
# share: PyTorch and a GPU found or a clear skip (exit 77, never a traceback), the
# device fields every peer document carries, the back-to-back timing loop, and the
# document written to disk.
import json
import statistics
import sys
import time


def torch_with_gpu(prog):
    """(torch, None) when PyTorch imports and sees a GPU, else (None, 77) after saying why."""
    try:
        import torch
    except ImportError as e:
        print(f"{prog}: PyTorch does not import ({e!r}); the peer needs it", file=sys.stderr)
        return None, 77
    if not torch.cuda.is_available():
        print(f"{prog}: no usable GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return None, 77
    return torch, None


def device_fields(torch):
    """The GPU and software a peer document was measured with, and when."""
    props = torch.cuda.get_device_properties(0)
    return dict(gpu=torch.cuda.get_device_name(), sm_count=props.multi_processor_count,
                torch=torch.__version__, cuda=torch.version.cuda,
                date=time.strftime("%Y-%m-%d %H:%M:%S"))


def write_doc(path, doc):
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1)


def events_median_us(torch, fn, inner, reps, warm=0):
    """Median over reps of (CUDA-event time around `inner` back-to-back calls of fn) /
    inner, in µs, on the current stream, after `warm` untimed calls."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / inner)
    return statistics.median(ts)
