"""Reading pickled files from strangers without running their code.

A pickle is a small program: `torch.load` and `pickle.load` call whatever function it names, so a
checkpoint can hold an object whose loading runs `os.system`. The readers here admit only what
checkpoints really contain: dicts, lists, tuples, strings, bytes, numbers, booleans, None,
OrderedDict, and (in PyTorch files) tensors rebuilt from the file's own storage records. A pickle
that names any other function or class is refused with UnsafeFile before anything is called.

PyTorch 1.13 has `torch.load(..., weights_only=True)`, but it refuses floats and bytes, which
nanoGPT checkpoints (learning rates in their config) and ours (token bytes) always hold.

    load_torch(path)   a file written by torch.save (the zip format of PyTorch 1.6 and later):
                       checkpoints, Hugging Face pytorch_model.bin
    load_plain(path)   a plain pickle (nanoGPT's meta.pkl): containers, strings, numbers

Reads the file; writes nothing. Used by export.py (and through it compare.py) and train.py.
"""
from __future__ import annotations

import collections
import io
import pickle
import zipfile
from pathlib import Path
from typing import Any


class UnsafeFile(Exception):
    """The file asks for something a checkpoint never needs, or is not laid out as one."""


# torch.save names a tensor's storage by its legacy class (torch.FloatStorage, ...): the torch
# dtype of each, by name (torch itself is imported only to read such a file: a plain pickle, a
# meta.pkl, needs none).
STORAGE_DTYPES = {
    "FloatStorage": "float32", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "DoubleStorage": "float64", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool",
}


class StorageKind:
    """Stands for torch.XStorage inside a storage record: only its element type is used."""

    def __init__(self, dtype: str):
        self.dtype_name = dtype

    @property
    def dtype(self) -> Any:
        import torch
        return getattr(torch, self.dtype_name)


def latin1_bytes(text: Any, encoding: Any) -> bytes:
    """Pickle protocol 2 writes a bytes object as _codecs.encode(str, "latin1"); nothing else
    is accepted under that name."""
    if not isinstance(text, str) or encoding != "latin1":
        raise UnsafeFile("_codecs.encode is only accepted for bytes written as latin-1 text")
    return text.encode("latin1")


def whole(x: Any) -> bool:
    return type(x) is int and x >= 0


def rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> Any:
    """torch._utils._rebuild_tensor_v2's arguments: a view of a storage, checked to lie in it."""
    import torch
    if not isinstance(storage, torch.Tensor) or storage.dim() != 1:
        raise UnsafeFile("a tensor record does not refer to a storage of the file")
    if not (whole(offset) and isinstance(size, tuple) and isinstance(stride, tuple)
            and len(size) == len(stride) and all(map(whole, size)) and all(map(whole, stride))):
        raise UnsafeFile("a tensor record has a malformed shape")
    count = 1
    for s in size:
        count *= s
    last = offset + sum((s - 1) * st for s, st in zip(size, stride)) if count else offset - 1
    if last >= storage.numel():
        raise UnsafeFile("a tensor record reaches past the end of its storage")
    return torch.as_strided(storage, size, stride, offset).clone()


def rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any) -> Any:
    """torch._utils._rebuild_parameter: the tensor itself (no gradient machinery)."""
    import torch
    if not isinstance(data, torch.Tensor):
        raise UnsafeFile("a parameter record does not hold a tensor")
    return data


class PlainUnpickler(pickle.Unpickler):
    """Only the pickle opcodes for plain data: every name a pickle asks for is looked up here,
    and anything not listed in `allowed` is refused."""

    allowed: dict[str, Any] = {"_codecs.encode": latin1_bytes}

    def find_class(self, module: str, name: str) -> Any:
        key = f"{module}.{name}"
        if key in self.allowed:
            return self.allowed[key]
        raise UnsafeFile(f"it asks to run {key}, which a checkpoint never needs "
                         "(loading a pickle can run code: the file may be malicious)")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeFile("it refers to external objects, which a plain pickle never does")


class TorchUnpickler(PlainUnpickler):
    """torch.save's data.pkl: plain data, OrderedDict, tensors from the archive's storages."""

    allowed = {**PlainUnpickler.allowed,
               "collections.OrderedDict": collections.OrderedDict,
               "torch._utils._rebuild_tensor_v2": rebuild_tensor,
               "torch._utils._rebuild_parameter": rebuild_parameter,
               **{f"torch.{name}": StorageKind(dtype) for name, dtype in STORAGE_DTYPES.items()}}

    def __init__(self, file: Any, archive: zipfile.ZipFile, prefix: str):
        super().__init__(file)
        self.archive, self.prefix = archive, prefix
        self.storages: dict[str, Any] = {}

    def persistent_load(self, pid: Any) -> Any:
        """("storage", torch.XStorage, key, location, element count) -> its data/KEY entry."""
        import torch
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], StorageKind) and isinstance(pid[2], str) and whole(pid[4])):
            raise UnsafeFile("it holds an external reference that is not a tensor storage")
        kind, key, count = pid[1], pid[2], pid[4]
        if key not in self.storages:
            try:
                info = self.archive.getinfo(f"{self.prefix}data/{key}")
            except KeyError:
                raise UnsafeFile(f"storage {key!r} is missing from the archive") from None
            if info.compress_type != zipfile.ZIP_STORED:
                raise UnsafeFile(f"storage {key!r} is compressed; torch.save never compresses")
            size = torch.tensor([], dtype=kind.dtype).element_size()
            if info.file_size != count * size:
                raise UnsafeFile(f"storage {key!r} has {info.file_size} bytes, its record says "
                                 f"{count} x {size}")
            data = bytearray(self.archive.read(info))
            self.storages[key] = (torch.frombuffer(data, dtype=kind.dtype) if count
                                  else torch.empty(0, dtype=kind.dtype))
        return self.storages[key]


def load_torch(path: Path) -> Any:
    """The object a torch.save file holds, read without running code from it."""
    if not zipfile.is_zipfile(path):
        raise UnsafeFile("it is not in torch.save's zip format (PyTorch 1.6 and later); the "
                         "older format is not read: load and save it again with a recent PyTorch")
    with zipfile.ZipFile(path) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise UnsafeFile("the archive does not hold exactly one data.pkl")
        prefix = pickles[0][: -len("data.pkl")]
        return TorchUnpickler(io.BytesIO(archive.read(pickles[0])), archive, prefix).load()


def load_plain(path: Path) -> Any:
    """The object a plain pickle holds, if it is made only of containers, strings and numbers."""
    with open(path, "rb") as f:
        return PlainUnpickler(f).load()
