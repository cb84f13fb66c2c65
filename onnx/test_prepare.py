"""prepare.py and gsched-onnx on small models made here: ones that split (a branchy graph with
weights, a model of two inputs, one of them integer ids; checked bit for bit), and the two kinds
that cannot (control flow, a shape that depends on the data), which must name the node at fault.

Usage: test_prepare.py GSCHED_ONNX ORT_LIBRARY WORK_DIR   (scripts/test.sh runs it)
"""

import os
import json
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

here = os.path.dirname(os.path.abspath(__file__))
exe, library, work = sys.argv[1:4]
failures = []


def model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "t", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def prepare(name, m, shape):
    path = os.path.join(work, name + ".onnx")
    onnx.save(m, path)
    out = os.path.join(work, name)
    done = subprocess.run([sys.executable, os.path.join(here, "prepare.py"), path, out, "--input-shape", shape],
                          capture_output=True, text=True)
    return done, out


def expect(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
rng = np.random.default_rng(0)
w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
v = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "v")

# Splits: two branches (MatMul -> Relu and MatMul -> Sigmoid) joined by Add, then Softmax.
branchy = model(
    [helper.make_node("MatMul", ["x", "w"], ["a"], name="left"),
     helper.make_node("Relu", ["a"], ["ra"], name="left_relu"),
     helper.make_node("MatMul", ["x", "v"], ["b"], name="right"),
     helper.make_node("Sigmoid", ["b"], ["sb"], name="right_sigmoid"),
     helper.make_node("Add", ["ra", "sb"], ["s"], name="join"),
     helper.make_node("Softmax", ["s"], ["y"], name="softmax")],
    [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, v])
done, out = prepare("branchy", branchy, "4x8")
expect(done.returncode == 0, f"a branchy model prepares ({done.stderr.strip()[-300:]})")
if done.returncode == 0:
    check = subprocess.run([exe, out, "--ort-library", library, "--check", "--threads", "2"], capture_output=True, text=True)
    expect(check.returncode == 0 and check.stdout.count(" yes ") == 6,
           f"its outputs are bitwise equal to ONNX Runtime's in all six modes ({check.stdout[-400:]}{check.stderr[-300:]})")
    # graphsched's own partition, then clusters of two nodes each (consecutive in the manifest's
    # topological order, so convex): every cluster's model reads and writes across clusters.
    part = subprocess.run([exe, out, "--ort-library", library, "--partition", "--threads", "2"],
                          capture_output=True, text=True)
    expect(part.returncode == 0 and os.path.exists(os.path.join(out, "partition-2.json")),
           f"graphsched partitions it ({part.stderr.strip()[-300:]})")
    if part.returncode == 0:
        with open(os.path.join(out, "partition-2.json")) as f:
            considered = json.load(f)["considered"]
        # A call is given at least what an empty one (call.onnx) was measured to cost.
        expect(considered and all(0 < p["empty_call_ns"] <= p["call_cost_ns"] for p in considered),
               f"every way's call cost is at least the empty call's, measured ({considered})")
        # The memory pattern is kept unless value by value saves at least 1 MiB a run (and costs
        # under 1.5%): this model's values are a few hundred bytes, so every way keeps it, and
        # records what it decided from.
        wholes = [p.get("whole", {}) for p in considered]
        expect(all(w.get("pattern_ns", 0) > 0 and w.get("by_value_ns", 0) > 0 and w.get("pattern_bytes", 0) > 0
                   for w in wholes) and all(p["memory_pattern"] for p in considered),
               f"every way keeps the memory pattern, from the whole model's times and bytes ({wholes})")
    # Serving with a priority client on graphsched's own clusters (the model serves itself as
    # the priority model): every server's rows, and the priority stream's, checked bit for bit.
    for t in ("1", "2"):
        subprocess.run([sys.executable, os.path.join(here, "prepare.py"), "--clusters",
                        os.path.join(out, f"partition-{t}.json"), os.path.join(out, f"clusters-{t}")],
                       capture_output=True, text=True)
    served = subprocess.run([exe, out, "--ort-library", library, "--serve", "--clients", "2", "--seconds", "0.2",
                             "--priority-model", out, "--json"], capture_output=True, text=True)
    rows = json.loads(served.stdout)["serve"] if served.returncode == 0 else []
    with_priority = [r for r in rows if "priority_p99_ns" in r]
    expect(len(rows) == 8 and len(with_priority) == 5
           and all(r["bitwise_equal"] and r["requests"] > 0 for r in rows)
           and all(r["priority_bitwise_equal"] and r["priority_requests"] > 0 for r in with_priority),
           f"it serves two clients and a priority client, every answer equal ({served.stdout[-400:]}{served.stderr[-300:]})")
    with open(os.path.join(out, "manifest.json")) as f:
        count = len(json.load(f)["nodes"])
    pairs = [list(range(i, min(i + 2, count))) for i in range(0, count, 2)]
    with open(os.path.join(out, "partition-2.json"), "w") as f:
        # Listed last first: prepare.py must write them in an order where each comes after
        # those it reads from.
        json.dump({"chosen": {"clusters": pairs[::-1]}, "considered": []}, f)
    for t in ("1", "2"):
        written = subprocess.run([sys.executable, os.path.join(here, "prepare.py"), "--clusters",
                                  os.path.join(out, f"partition-{t}.json"), os.path.join(out, f"clusters-{t}")],
                                 capture_output=True, text=True)
        expect(written.returncode == 0, f"prepare.py --clusters writes the cluster models at {t} ({written.stderr.strip()[-300:]})")
    check = subprocess.run([exe, out, "--ort-library", library, "--check", "--threads", "2"], capture_output=True, text=True)
    expect(check.returncode == 0 and check.stdout.count(" yes ") == 12 and "clusters, scheduled plan" in check.stdout,
           f"its clusters ({len(pairs)} at 2 threads) are bitwise equal too ({check.stdout[-600:]}{check.stderr[-300:]})")
    bad = os.path.join(out, "partition-bad.json")
    with open(bad, "w") as f:
        json.dump({"chosen": {"clusters": pairs[1:]}, "considered": []}, f)
    refused = subprocess.run([sys.executable, os.path.join(here, "prepare.py"), "--clusters", bad, os.path.join(out, "bad")],
                             capture_output=True, text=True)
    expect(refused.returncode == 2 and "leave" in refused.stderr,
           f"clusters that leave nodes out are refused ({refused.stderr.strip()[-200:]})")

# Splits: a node whose first, optional output is omitted (GRU's Y: outputs ["", "Y_h"]).
seq = helper.make_tensor_value_info("seq", TensorProto.FLOAT, [2, "batch", 3])
gru_w = numpy_helper.from_array(rng.standard_normal((1, 6, 3)).astype(np.float32), "gru_w")
gru_r = numpy_helper.from_array(rng.standard_normal((1, 6, 2)).astype(np.float32), "gru_r")
gru = model([helper.make_node("GRU", ["seq", "gru_w", "gru_r"], ["", "h"], name="gru", hidden_size=2),
             helper.make_node("Relu", ["h"], ["y"], name="relu")],
            [seq], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [gru_w, gru_r])
done, out = prepare("gru", gru, "2x1x3")
expect(done.returncode == 0, f"a node with an omitted optional output prepares ({done.stderr.strip()[-300:]})")
if done.returncode == 0:
    check = subprocess.run([exe, out, "--ort-library", library, "--check"], capture_output=True, text=True)
    expect(check.returncode == 0 and check.stdout.count(" yes ") == 6,
           f"and checks bit for bit ({check.stdout[-300:]}{check.stderr[-300:]})")

# Splits: two graph inputs, float features and integer ids (an embedding lookup), fixed by one
# shape that fits both; and by NAME=SHAPE pairs.
ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 8])
emb = numpy_helper.from_array(rng.standard_normal((2, 3)).astype(np.float32), "emb")
axis = numpy_helper.from_array(np.array([2], dtype=np.int64), "axis")
two_inputs = model(
    [helper.make_node("MatMul", ["x", "w"], ["xw"], name="features"),
     helper.make_node("Gather", ["emb", "ids"], ["looked_up"], name="lookup"),
     helper.make_node("ReduceSum", ["looked_up", "axis"], ["pooled"], name="pool", keepdims=0),
     helper.make_node("Add", ["xw", "pooled"], ["s"], name="join"),
     helper.make_node("Relu", ["s"], ["y"], name="relu")],
    [x, ids], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, emb, axis])
for shape in ("4x8", "x=4x8,ids=4x8"):
    done, out = prepare("two_inputs", two_inputs, shape)
    expect(done.returncode == 0, f"a model of two inputs prepares with --input-shape {shape} ({done.stderr.strip()[-300:]})")
    if done.returncode == 0:
        with open(os.path.join(out, "manifest.json")) as f:
            got = [(i["name"], i["shape"]) for i in json.load(f)["inputs"]]
        expect(got == [("x", [4, 8]), ("ids", [4, 8])], f"both inputs are in the manifest, fixed ({got})")
        check = subprocess.run([exe, out, "--ort-library", library, "--check", "--threads", "2"],
                               capture_output=True, text=True)
        expect(check.returncode == 0 and check.stdout.count(" yes ") == 6,
               f"and check bit for bit in all six modes ({check.stdout[-300:]}{check.stderr[-300:]})")
# graphsched's partition of a model of two inputs names the manifest's nodes (graphsched numbers
# the graph inputs first, as many as there are: a partition read as if there were one named a
# node past the last, seen on a voice model of three inputs), and its clusters check bit for bit.
if done.returncode == 0:
    part = subprocess.run([exe, out, "--ort-library", library, "--partition", "--threads", "2"],
                          capture_output=True, text=True)
    with open(os.path.join(out, "manifest.json")) as f:
        count = len(json.load(f)["nodes"])
    listed = []
    if part.returncode == 0:
        with open(os.path.join(out, "partition-2.json")) as f:
            listed = sorted(i for c in json.load(f)["chosen"]["clusters"] for i in c)
    expect(part.returncode == 0 and listed == list(range(count)),
           f"its partition lists the model's {count} nodes once each ({listed}; {part.stderr.strip()[-300:]})")
    written = [subprocess.run([sys.executable, os.path.join(here, "prepare.py"), "--clusters",
                               os.path.join(out, f"partition-{t}.json"), os.path.join(out, f"clusters-{t}")],
                              capture_output=True, text=True) for t in ("1", "2")]
    check = subprocess.run([exe, out, "--ort-library", library, "--check", "--threads", "2"],
                           capture_output=True, text=True)
    expect(all(w.returncode == 0 for w in written) and check.returncode == 0 and check.stdout.count(" yes ") == 12,
           f"its clusters are written and check bit for bit ({[w.stderr.strip()[-200:] for w in written]} "
           f"{check.stdout[-400:]}{check.stderr[-300:]})")
done, _ = prepare("two_inputs_unfit", two_inputs, "4x8x2")
expect(done.returncode == 2 and "fits no input" in done.stderr and "ids of rank 2" in done.stderr,
       f"a shape that fits no input is refused, naming the inputs ({done.stderr.strip()[-300:]})")
done, _ = prepare("two_inputs_unnamed", two_inputs, "x=4x8")
expect(done.returncode == 2 and "'ids' has dynamic dimensions" in done.stderr and "ids=SHAPE" in done.stderr,
       f"an input left dynamic is named ({done.stderr.strip()[-300:]})")

# Blocked: an If node (control flow) must be named.
branch = lambda name, op: helper.make_graph([helper.make_node(op, ["x"], [name])], name, [],
                                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)])
zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
control = model([helper.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
                 helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
                 helper.make_node("If", ["cond"], ["y"], name="choose_branch",
                                  then_branch=branch("t", "Relu"), else_branch=branch("e", "Sigmoid"))],
                [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [zero])
done, _ = prepare("control", control, "4x8")
expect(done.returncode == 2 and "choose_branch" in done.stderr,
       f"control flow is refused, naming the node ({done.stderr.strip()[-300:]})")

# Blocked: NonZero's output shape depends on the data; the message names the node.
data_shaped = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                     helper.make_node("NonZero", ["r"], ["y"], name="where_positive")],
                    [x], [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
done, _ = prepare("data_shaped", data_shaped, "4x8")
expect(done.returncode == 2 and "where_positive" in done.stderr,
       f"a data-dependent shape is refused, naming the node ({done.stderr.strip()[-300:]})")

# Blocked: a sequence value (as a classifier's ZipMap gives a sequence of maps) has no single
# buffer; the message names the node and the type. So does a graph input of strings.
sequenced = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                   helper.make_node("SequenceConstruct", ["r", "x"], ["y"], name="as_sequence")],
                  [x], [helper.make_value_info("y", helper.make_sequence_type_proto(
                      helper.make_tensor_type_proto(TensorProto.FLOAT, None)))])
done, _ = prepare("sequenced", sequenced, "4x8")
expect(done.returncode == 2 and "as_sequence" in done.stderr and "seq(tensor(float))" in done.stderr,
       f"a sequence value is refused, naming the node and its type ({done.stderr.strip()[-300:]})")
words = helper.make_tensor_value_info("words", TensorProto.STRING, [4])
stringed = model([helper.make_node("StringNormalizer", ["words"], ["y"], name="lower", case_change_action="LOWER")],
                 [words], [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
done, _ = prepare("stringed", stringed, "")
expect(done.returncode == 2 and "'words' is a tensor of strings" in done.stderr,
       f"an input of strings is refused, naming it ({done.stderr.strip()[-300:]})")

# Bad input: a file that is not a model.
path = os.path.join(work, "not_a_model.onnx")
with open(path, "w") as f:
    f.write("not a model")
done = subprocess.run([sys.executable, os.path.join(here, "prepare.py"), path, os.path.join(work, "not_a_model")],
                      capture_output=True, text=True)
expect(done.returncode == 2 and "cannot read" in done.stderr and "Traceback" not in done.stderr,
       f"a file that is not a model is refused in a sentence ({done.stderr.strip()[-300:]})")

# Bad input: a shape of the wrong rank.
done, _ = prepare("wrong_rank", branchy, "4x8x2")
expect(done.returncode == 2 and "--input-shape gives 3" in done.stderr,
       f"an input shape of the wrong rank is refused ({done.stderr.strip()[-200:]})")

sys.exit(1 if failures else 0)
