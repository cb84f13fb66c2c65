#!/usr/bin/env bash
# A real ONNX model run by graphsched with ONNX Runtime's own kernels, one session per node, side
# by side with ONNX Runtime (onnx/README.md tells how it works).
#
#   scripts/onnx.sh MODEL [--input-shape 1x3x640x640 | NAME=SHAPE,...] [--threads N] [--json] [--check]
#                         [--runs R] [--rounds K] [--call-cost]
#                         [--serve [--clients N] [--seconds T] [--budget BYTES]
#                                  [--priority-model MODEL2 [--priority-shape S2]]]
#   scripts/onnx.sh --self-test
#
# MODEL is an .onnx file, or `det` / `cls`: PP-OCRv4's text detector and the PP-OCR mobile
# direction classifier, as the PyPI package rapidocr-onnxruntime 1.4.4 ships them.
# --check only compares the outputs, bit for bit, in every memory mode (exit 1 if they differ).
# --call-cost only times each node's session alone (--runs calls each) against the whole model.
# --serve: N closed-loop clients for T seconds against graphsched (its clusters, one executor and
# pool, a memory budget: --budget, or one request's need times the threads) and ONNX Runtime (one
# session shared by every client): `serve` rows.
# --priority-model (with --serve): one more closed-loop client sends MODEL2 requests (det, cls or a
# file, prepared and partitioned like MODEL) at high priority on graphsched's same executor and
# pool (whose threads then run at nice 10 with the other clients' requests, so that the OS runs
# the urgent ones ahead), and to a second ONNX Runtime session; its latencies are reported apart
# (priority_*), and every server runs without it too.
# Otherwise graphsched first partitions the model (gsched-onnx --partition, prepare.py --clusters):
# the `graphsched (auto ...)` rows run its clusters the way it chose.
# --self-test (run by scripts/test.sh): the classifier's --check, then onnx/test_prepare.py.
#
# On a fresh machine it makes a virtual environment with onnxruntime and onnx, fetches the model
# asked for, prepares it (onnx/prepare.py) and builds onnx/ (gsched-onnx). Everything goes under
# $GS_ONNX_HOME (default target/onnx); nothing downloaded is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
home=${GS_ONNX_HOME:-$target/onnx}
profile=${GS_ONNX_PROFILE:-release}
# Pinned: ort 2.0.0-rc.15 (onnx/Cargo.toml) speaks ONNX Runtime's API up to 1.31; newer
# libraries serve older APIs, never the other way round.
ort_version=1.32.0
onnx_version=1.23.2

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
if [ "$1" = --self-test ]; then
    [ $# -eq 1 ] || usage
    bash "$0" cls --check
    dir=$target/$profile; [ "$profile" = dev ] && dir=$target/debug
    library=$("$home/venv/bin/python" -c 'import glob, os, onnxruntime; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*")))[0])')
    rm -rf "$home/self-test" && mkdir -p "$home/self-test"
    exec "$home/venv/bin/python" onnx/test_prepare.py "$dir/gsched-onnx" "$library" "$home/self-test"
fi
model=$1; shift
shape=""
priority_model=""
priority_shape=""
serve=""
args=()
threads=2
call_cost=""
while [ $# -gt 0 ]; do
    case $1 in
        --input-shape) [ $# -ge 2 ] || usage; shape=$2; shift 2 ;;
        --threads) [ $# -ge 2 ] || usage; threads=$2; args+=("$1" "$2"); shift 2 ;;
        --runs|--rounds|--clients|--seconds|--budget) [ $# -ge 2 ] || usage; args+=("$1" "$2"); shift 2 ;;
        --priority-model) [ $# -ge 2 ] || usage; priority_model=$2; shift 2 ;;
        --priority-shape) [ $# -ge 2 ] || usage; priority_shape=$2; shift 2 ;;
        --call-cost) call_cost=1; args+=("$1"); shift ;;
        --serve) serve=1; args+=("$1"); shift ;;
        --json|--check) args+=("$1"); shift ;;
        *) echo "onnx.sh: unknown argument $1" >&2; usage ;;
    esac
done
if [ -n "$priority_model" ] && [ -z "$serve" ]; then
    echo "onnx.sh: --priority-model goes with --serve" >&2; exit 2
fi
if [ -n "$priority_shape" ] && [ -z "$priority_model" ]; then
    echo "onnx.sh: --priority-shape goes with --priority-model" >&2; exit 2
fi

mkdir -p "$home"
venv=$home/venv
ready=$venv/.ready-ort-$ort_version-onnx-$onnx_version
if [ ! -f "$ready" ]; then
    # Debian's own python3 needs python3-venv for `python3 -m venv`; pyenv's has it built in.
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        . scripts/lib.sh
        install_packages python3-venv
    fi
    echo "== python: onnxruntime $ort_version and onnx $onnx_version in $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "onnxruntime==$ort_version" "onnx==$onnx_version" numpy
    touch "$ready"
fi
py=$venv/bin/python
library=$("$py" -c 'import glob, os, onnxruntime; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*")))[0])')

# resolve MODEL SHAPE: sets `path` (the .onnx file) and `shape` (det and cls have defaults),
# fetching det and cls when first asked for.
resolve() {
    path=$1; shape=$2
    case $1 in
        det|cls)
            models=$home/models
            if [ ! -f "$models/.ready" ]; then
                echo "== models: rapidocr-onnxruntime 1.4.4 from PyPI" >&2
                mkdir -p "$models/wheel"
                "$venv/bin/pip" download -q --disable-pip-version-check --no-deps "rapidocr-onnxruntime==1.4.4" -d "$models/wheel"
                "$py" - "$models" <<'EOF'
import glob, os, sys, zipfile
out = sys.argv[1]
(wheel,) = glob.glob(os.path.join(out, "wheel", "*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.endswith(("_det_infer.onnx", "_cls_infer.onnx")):
            with open(os.path.join(out, os.path.basename(name)), "wb") as f:
                f.write(z.read(name))
EOF
                touch "$models/.ready"
            fi
            if [ "$1" = det ]; then
                path=$models/ch_PP-OCRv4_det_infer.onnx; shape=${shape:-1x3x640x640}
            else
                path=$models/ch_ppocr_mobile_v2.0_cls_infer.onnx; shape=${shape:-1x3x48x192}
            fi
            ;;
    esac
    [ -f "$path" ] || { echo "onnx.sh: no model at $path" >&2; exit 2; }
}

# prepare: prepares `path` at `shape`; sets `prepared`, its directory.
prepare() {
    local name
    name=$(basename "$path" .onnx)${shape:+-$shape}
    prepared=$home/prepared/$name
    echo "== prepare $path${shape:+ at $shape}" >&2
    "$py" onnx/prepare.py "$path" "$prepared" ${shape:+--input-shape "$shape"} >&2
}

resolve "$model" "$shape"
prepare
main_prepared=$prepared
priority_prepared=""
if [ -n "$priority_model" ]; then
    resolve "$priority_model" "$priority_shape"
    prepare
    priority_prepared=$prepared
    prepared=$main_prepared
fi

echo "== build gsched-onnx ($profile)" >&2
cargo build --locked --quiet --profile "$profile" -p graphsched-onnx
dir=$target/$profile; [ "$profile" = dev ] && dir=$target/debug
gsched_onnx=("$dir/gsched-onnx" "$prepared" --ort-library "$library")
if [ -z "$call_cost" ]; then
    # graphsched picks the clusters and how to run them, from the per-node graph's measurements;
    # prepare.py writes one model per cluster (the `graphsched (auto ...)` rows, and the checks).
    # A priority model is partitioned the same way (once, if it is MODEL itself).
    partitioned=("$prepared")
    if [ -n "$priority_prepared" ] && [ "$priority_prepared" != "$prepared" ]; then
        partitioned+=("$priority_prepared")
    fi
    for p in "${partitioned[@]}"; do
        echo "== partition $(basename "$p"): graphsched chooses the clusters (1 and $threads threads)" >&2
        rm -rf "$p"/partition-*.json "$p"/clusters-*
        "$dir/gsched-onnx" "$p" --ort-library "$library" --partition --threads "$threads"
        for t in $(printf '%s\n' 1 "$threads" | sort -u); do
            "$py" onnx/prepare.py --clusters "$p/partition-$t.json" "$p/clusters-$t" >&2
        done
    done
fi
if [ -n "$priority_prepared" ]; then
    args+=(--priority-model "$priority_prepared")
fi
exec "${gsched_onnx[@]}" "${args[@]}"
