#!/bin/sh
# examples/torch_train.cpp as docs/torch.md runs it: killed (SIGKILL) after step 100's
# save, resumed to step 200, against an uninterrupted 200-step run. Both must print the
# same final loss and weight sum, and Python's torch must load the exported
# safetensors into the same architecture (strict load_state_dict) with that weight sum.
#
#   torch_train_resume.sh TORCH_TRAIN WORK_DIR PYTHON
set -eu
bin=$1
work=$2
python=$3
rm -rf "$work"
mkdir -p "$work"
"$bin" "$work/run" 200 --kill-at 100 > "$work/first.txt" 2>&1 || true
grep -q "^killed at step 100" "$work/first.txt" || { cat "$work/first.txt"; echo "FAIL: not killed at step 100"; exit 1; }
"$bin" "$work/run" 200 > "$work/resumed.txt"
"$bin" "$work/straight" 200 > "$work/straight.txt"
cat "$work/resumed.txt" "$work/straight.txt"
grep -q "^resumed at step 100" "$work/resumed.txt" || { echo "FAIL: did not resume at step 100"; exit 1; }
resumed=$(grep "^step 200" "$work/resumed.txt")
straight=$(grep "^step 200" "$work/straight.txt")
[ "$resumed" = "$straight" ] || { echo "FAIL: resumed '$resumed', uninterrupted '$straight'"; exit 1; }
sum=$("$python" - "$work/run/export/model.safetensors" <<'PY'
import json, struct, sys, torch
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    data = f.read()
dtypes = {"F32": torch.float32, "I64": torch.int64}
sd = {k: torch.frombuffer(bytearray(data[e["data_offsets"][0]:e["data_offsets"][1]]), dtype=dtypes[e["dtype"]]).reshape(e["shape"])
      for k, e in header.items() if k != "__metadata__"}
net = torch.nn.Module()
net.layers = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
net.load_state_dict(sd)
print(repr(sum(p.double().abs().sum().item() for p in net.parameters())))
PY
)
# the .pt export, as a PyTorch user loads it: torch.load with weights_only, a strict load_state_dict
pt_sum=$("$python" - "$work/run/export/model.pt" <<'PY'
import sys, torch
net = torch.nn.Module()
net.layers = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
net.load_state_dict(torch.load(sys.argv[1], weights_only=True))
print(repr(sum(p.double().abs().sum().item() for p in net.parameters())))
PY
)
[ "$pt_sum" = "$sum" ] || { echo "FAIL: model.pt's weight sum $pt_sum, model.safetensors' $sum"; exit 1; }
cpp=$(echo "$straight" | sed 's/.* weights //')
"$python" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if a == b else 1)" "$sum" "$cpp" \
  || { echo "FAIL: Python's weight sum $sum, C++'s $cpp"; exit 1; }
rm -rf "$work"
echo "ok: killed, resumed and uninterrupted runs agree; Python loads the safetensors and .pt exports ($sum)"
