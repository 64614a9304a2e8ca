# Writes the torch.save fixtures of tests/test_pytorch.cpp with PyTorch itself (Debian's
# python3-torch 1.13), and beside each a .json of the values torch.load gives back, as
# raw little-endian hex per tensor, which the test compares with what ckpt reads.
#   /usr/bin/python3 tests/data/pytorch/make_fixtures.py tests/data/pytorch
import collections
import json
import os
import pickle
import struct
import sys

import torch

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


def flat(obj, prefix, into):
    """Leaves as ckpt names them: dict keys split at '.', list items by index."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            flat(v, prefix + [str(k)], into)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flat(v, prefix + [str(i)], into)
    else:
        name = ".".join(p for seg in prefix for p in [seg])
        if isinstance(obj, torch.Tensor):
            t = obj.detach().contiguous()
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            into[name] = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "hex": raw.hex()}
        elif isinstance(obj, bool):
            into[name] = {"dtype": "bool", "value": obj}
        elif isinstance(obj, int):
            into[name] = {"dtype": "int64", "value": obj}
        elif isinstance(obj, float):
            into[name] = {"dtype": "float64", "hex": struct.pack("<d", obj).hex()}
        elif obj is None:
            into[name] = {"dtype": "none"}
        elif isinstance(obj, str):
            into[name] = {"dtype": "string", "value": obj}


def save(name, obj):
    path = os.path.join(out, name)
    torch.save(obj, path)
    leaves = {}
    flat(torch.load(path), [], leaves)
    with open(path + ".json", "w") as f:
        json.dump(leaves, f, indent=1, sort_keys=True)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3)
        self.bn = torch.nn.BatchNorm2d(3)
        self.norm = torch.nn.LayerNorm(4)
        self.emb = torch.nn.Embedding(5, 4)
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x, ids):
        h = self.bn(self.conv(x)).mean(dim=(2, 3))  # (n, 3)
        h = torch.nn.functional.pad(h, (0, 1)) + self.emb(ids)
        return self.fc(self.norm(h))


net = Net()
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for _ in range(2):
    opt.zero_grad()
    net(torch.randn(2, 2, 5, 5), torch.tensor([1, 3])).sum().backward()
    opt.step()

# a module's state_dict: Linear, Conv2d, LayerNorm, Embedding, BatchNorm with its buffers
save("net_state_dict.pt", net.state_dict())
# a nested training checkpoint: model, optimizer (Adam state, param_groups), epoch
save("checkpoint.pt", {"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": 7, "note": "two steps"})

# dtypes: bf16, fp16, int8, uint8, bool, int16/32/64, float64, complex; zero-size, scalar
save("dtypes.pt", {
    "bf16": torch.randn(3, 2).to(torch.bfloat16),
    "fp16": torch.randn(4).to(torch.float16),
    "int8": torch.tensor([-128, -1, 0, 127], dtype=torch.int8),
    "uint8": torch.tensor([0, 255], dtype=torch.uint8),
    "bool": torch.tensor([True, False, True]),
    "int16": torch.tensor([[-300, 300]], dtype=torch.int16),
    "int32": torch.tensor([1 << 30, -5], dtype=torch.int32),
    "int64": torch.tensor([1 << 40], dtype=torch.int64),
    "f64": torch.randn(2, 2, dtype=torch.float64),
    "c64": torch.randn(2, dtype=torch.complex64),
    "empty": torch.zeros(0, 3),
    "scalar": torch.tensor(2.5),
})

# views and tied weights: one storage, several tensors with offsets and strides
base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
emb = torch.nn.Embedding(6, 3)
head = torch.nn.Linear(3, 6, bias=False)
head.weight = emb.weight  # tied
save("views.pt", {
    "base": base,
    "row": base[2],                # offset 12
    "col": base[:, 1],             # stride 6
    "t": base.t(),                 # transposed
    "block": base[1:3, 2:5],       # offset and strides
    "step": base.view(-1)[::5],    # stride 5
    "emb.weight": emb.weight,
    "head.weight": head.weight,    # the same tensor
    "expand": torch.tensor([1.0, 2.0]).expand(3, 2),  # stride 0
})

# a bare tensor, not in a dict
torch.save(torch.arange(3.0), os.path.join(out, "bare.pt"))

# the legacy format of PyTorch before 1.6
torch.save({"w": torch.ones(2)}, os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)

# Hugging Face's sharded layout: shards and the index's weight_map
sharded = os.path.join(out, "sharded")
os.makedirs(sharded, exist_ok=True)
sd = net.state_dict()
names = list(sd)
shards = [names[: len(names) // 2], names[len(names) // 2:]]
weight_map = {}
for i, part in enumerate(shards):
    fname = "pytorch_model-%05d-of-%05d.bin" % (i + 1, len(shards))
    torch.save(collections.OrderedDict((n, sd[n]) for n in part), os.path.join(sharded, fname))
    weight_map.update({n: fname for n in part})
with open(os.path.join(sharded, "pytorch_model.bin.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": sum(t.numel() * t.element_size() for t in sd.values())},
               "weight_map": weight_map}, f, indent=2)


# hostile pickles inside real torch.save archives: data.pkl replaced
class System:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/ckpt_pytorch_pwned",))


class Eval:
    def __reduce__(self):
        return (eval, ("1+1",))


def hostile(name, pickled):
    import zipfile
    path = os.path.join(out, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickled)
        z.writestr("archive/version", "3\n")


hostile("hostile_system.pt", pickle.dumps({"x": System()}, protocol=2))
hostile("hostile_eval.pt", pickle.dumps([Eval()], protocol=2))
# recursion: a list that holds itself
loop = []
loop.append(loop)
hostile("hostile_loop.pt", pickle.dumps({"a": loop}, protocol=2))
# deep nesting
# deep nesting: 5000 lists inside each other (written by hand: pickle itself recurses)
hostile("hostile_deep.pt", b"\x80\x02" + b"]" * 5000 + b"a" * 4999 + b".")
# a huge size: a tensor of 2**40 elements over a storage of 1
huge = (b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
        b"ctorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQK\x00\x8a\x06\x00\x00\x00\x00\x00\x01\x85"
        b"K\x01\x85\x89ccollections\nOrderedDict\n)RtRs.")
import zipfile
with zipfile.ZipFile(os.path.join(out, "hostile_huge.pt"), "w", zipfile.ZIP_STORED) as z:
    z.writestr("archive/data.pkl", huge)
    z.writestr("archive/data/0", b"\0\0\0\0")
    z.writestr("archive/version", "3\n")
