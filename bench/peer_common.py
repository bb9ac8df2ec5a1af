# peer_common.py — what bench/'s two peer drivers (peer_scan.py, peer_train_step.py)
# share: PyTorch and a GPU found or a clear skip (exit 77, never a traceback), the
# device fields every peer document carries, and the document written to disk.
import json
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
