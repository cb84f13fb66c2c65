"""Prepare an ONNX model for graphsched: one small model per node, and a manifest.

Steps (each says which node is at fault when it cannot go on):
1. fix the graph inputs' shapes (--input-shape) and turn Constant nodes into initializers;
2. let ONNX Runtime optimize it at the highest level that saves to a file (this also folds the
   shape subgraphs, which a fixed input shape makes constant);
3. run the optimized model once per random input, every intermediate value an output, to learn
   each value's element type and shape; a value whose shape differs between two inputs depends
   on the data, and blocks the split;
4. write each node as a model of its own (its weights inside) and manifest.json, which the
   graphsched-onnx program reads;
5. write call.onnx, one Identity of one float: a call that does nothing, whose time is the fixed
   cost of a call (gsched-onnx --partition measures it).

Usage: prepare.py MODEL.onnx OUT_DIR [--input-shape 1x3x640x640 | --input-shape ids=1x128,mask=1x128]
       prepare.py --clusters PREPARED_DIR/partition-T.json OUT_DIR

With --clusters, it writes one model per cluster that graphsched chose (gsched-onnx --partition):
the cluster's nodes in their order, its weights, as inputs the values its nodes read from outside
it, as outputs the values read outside it or that are graph outputs; and a manifest of the same
form, one entry per cluster.
"""

import argparse
import heapq
import json
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper
import onnxruntime as ort

ort.set_default_logger_severity(3)  # the NCHWc warning when saving: expected, the model runs here


def fail(message):
    print(f"prepare.py: {message}", file=sys.stderr)
    sys.exit(2)


def graph_inputs(graph):
    initializers = {i.name for i in graph.initializer}
    return [i for i in graph.input if i.name not in initializers]


def parse_shape(text, what):
    try:
        shape = [int(d) for d in text.lower().split("x")]
    except ValueError:
        fail(f"{what}: {text!r} is not a shape (dimensions joined by x, as 1x3x224x224)")
    if any(d <= 0 for d in shape):
        fail(f"{what}: {text!r} has a dimension below 1")
    return shape


def refuse_other_than_tensors(graph):
    """Refuses a graph input that is not a tensor of fixed-size elements: a sequence, a map or an
    optional has no single buffer, and a string tensor's elements have no fixed size."""
    for i in graph_inputs(graph):
        kind = i.type.WhichOneof("value")
        if kind != "tensor_type":
            fail(f"input {i.name!r} is a {kind or 'value of no type'}, not a tensor: graphsched runs tensors only")
        if i.type.tensor_type.elem_type == onnx.TensorProto.STRING:
            fail(f"input {i.name!r} is a tensor of strings, whose elements have no fixed size: "
                 "graphsched runs tensors of numbers only")


def fix_input_shape(model, shape_text):
    """Fixes the graph inputs' dynamic dimensions from --input-shape: one shape (for a model of
    one input, or for every input of that rank with dynamic dimensions), or NAME=SHAPE pairs
    joined by commas, one per input to fix."""
    inputs = graph_inputs(model.graph)
    if not inputs:
        fail("the model has no graph input")
    named = {}
    if "=" in shape_text:
        for part in shape_text.split(","):
            name, _, text = part.partition("=")
            if name not in {i.name for i in inputs}:
                fail(f"--input-shape names {name!r}, which is not a graph input "
                     f"(inputs: {', '.join(i.name for i in inputs)})")
            named[name] = parse_shape(text, f"--input-shape for {name!r}")
    elif shape_text:
        shape = parse_shape(shape_text, "--input-shape")
        dynamic = lambda i: any(d.dim_value <= 0 for d in i.type.tensor_type.shape.dim)
        if len(inputs) == 1:
            named[inputs[0].name] = shape
        else:
            for i in inputs:
                if dynamic(i) and len(i.type.tensor_type.shape.dim) == len(shape):
                    named[i.name] = shape
            if not named:
                fail(f"--input-shape {shape_text} fits no input with dynamic dimensions of rank {len(shape)}; "
                     "give NAME=SHAPE for each (inputs: "
                     + ", ".join(f"{i.name} of rank {len(i.type.tensor_type.shape.dim)}" for i in inputs) + ")")
    for i in inputs:
        dims = i.type.tensor_type.shape.dim
        shape = named.get(i.name)
        if shape is not None:
            if len(shape) != len(dims):
                fail(f"input {i.name!r} has {len(dims)} dimensions, --input-shape gives {len(shape)}")
            for dim, size in zip(dims, shape):
                if dim.HasField("dim_value") and dim.dim_value > 0 and dim.dim_value != size:
                    fail(f"input {i.name!r} fixes a dimension at {dim.dim_value}, --input-shape says {size}")
                dim.Clear()
                dim.dim_value = size
        missing = [k for k, d in enumerate(dims) if d.dim_value <= 0]
        if missing:
            hint = "give --input-shape" if len(inputs) == 1 else f"give --input-shape {i.name}=SHAPE"
            fail(f"input {i.name!r} has dynamic dimensions {missing}; {hint}")


def constants_to_initializers(graph):
    kept = []
    for node in graph.node:
        value = [a for a in node.attribute if a.name == "value"]
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and value:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(value[0].t)
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
        else:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)


def optimize(fixed_path, out_dir):
    """Optimized model at the highest level ONNX Runtime saves and loads back; its path and level."""
    levels = [
        ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        ("extended", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
        ("basic", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
    ]
    errors = []
    for name, level in levels:
        path = os.path.join(out_dir, "prepared.onnx")
        try:
            options = ort.SessionOptions()
            options.graph_optimization_level = level
            options.optimized_model_filepath = path
            ort.InferenceSession(fixed_path, options, providers=["CPUExecutionProvider"])
            check = ort.SessionOptions()
            check.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            ort.InferenceSession(path, check, providers=["CPUExecutionProvider"])
            return path, name
        except Exception as e:  # the next level down may save where this one cannot
            errors.append(f"{name}: {e}")
    fail("ONNX Runtime could not optimize and save the model: " + "; ".join(errors))


def learn_values(model, inputs):
    """Element type and shape of every node output, checked on two different inputs.
    `inputs`: (name, shape, dtype) of each graph input. Floats are drawn at random, integers in
    {0, 1} and booleans at random: valid indices, lengths and masks."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for name in node.output:
            if name and name not in outputs:
                probe.graph.output.append(onnx.ValueInfoProto(name=name))
                outputs.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    producer = {o: n for n in model.graph.node for o in n.output}

    def who(name):
        node = producer.get(name)
        return f"node {node.name!r} ({node.op_type})" if node else f"value {name!r}"

    for o in session.get_outputs():
        if not o.type.startswith("tensor("):
            fail(f"{who(o.name)} gives {o.name!r} a value of type {o.type}, not a tensor: "
                 "graphsched runs tensors only (a sequence or a map has no single buffer)")
        if o.type == "tensor(string)":
            fail(f"{who(o.name)} gives {o.name!r} a tensor of strings, whose elements have no fixed size: "
                 "graphsched runs tensors of numbers only")
    names = [o.name for o in session.get_outputs()]
    seen = []
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        feed = {}
        for name, shape, dtype in inputs:
            if np.issubdtype(dtype, np.floating):
                feed[name] = rng.standard_normal(shape).astype(dtype)
            elif dtype == np.bool_:
                feed[name] = rng.integers(0, 2, shape).astype(np.bool_)
            else:
                feed[name] = rng.integers(0, 2, shape).astype(dtype)
        results = session.run(names, feed)
        seen.append({n: (r.dtype, r.shape) for n, r in zip(names, results)})
    for name in names:
        if int(np.prod(seen[0][name][1])) == 0:
            fail(f"{who(name)} gives {name!r} no elements (shape {seen[0][name][1]}): graphsched buffers hold at least one byte")
        if seen[0][name] != seen[1][name]:
            fail(f"{who(name)} gives {name!r} a shape that depends on the input data "
                 f"({seen[0][name][1]} vs {seen[1][name][1]}): the model cannot be split into static nodes")
    return seen[0]


def value_info(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape))


def split(model, values, out_dir):
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    input_names = {i.name for i in graph_inputs(graph)}
    os.makedirs(os.path.join(out_dir, "nodes"), exist_ok=True)
    nodes = []
    for index, node in enumerate(graph.node):
        name = node.name or f"node{index}"
        for attribute in node.attribute:
            if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                fail(f"node {name!r} ({node.op_type}) has a subgraph in attribute {attribute.name!r}: "
                     "control flow cannot be split into single-node models")
        ins, weights, seen = [], [], set()
        for value in node.input:
            if not value or value in seen:
                continue
            seen.add(value)
            if value in initializers:
                weights.append(initializers[value])
            elif value in values or value in input_names:
                ins.append(value)
            else:
                fail(f"node {name!r} ({node.op_type}) reads {value!r}, which nothing produces")
        single = helper.make_graph(
            [node], name,
            [value_info(v, *values[v]) for v in ins],
            [value_info(v, *values[v]) for v in node.output if v],
            initializer=weights)
        part = helper.make_model(single, opset_imports=model.opset_import, ir_version=model.ir_version)
        file = os.path.join("nodes", f"{index:04}.onnx")
        onnx.save(part, os.path.join(out_dir, file))
        nodes.append({
            "name": name, "op": node.op_type, "domain": node.domain, "file": file,
            "inputs": list(node.input), "outputs": [o for o in node.output if o],
        })
    return nodes


def tensor_entry(name, dtype, shape):
    dtype = np.dtype(dtype)
    return {
        "name": name,
        "elem_type": int(helper.np_dtype_to_tensor_dtype(dtype)),
        "elem_bytes": dtype.itemsize,
        "shape": [int(d) for d in shape],
    }


def cluster_order(clusters, cluster_of, graph, producer, choice_path):
    """The clusters' indices in an order where every cluster comes after those it reads from
    (the manifest's nodes must be topological; a partition need not list its clusters so),
    ties to the cluster with the earliest node. Clusters that read from each other are refused."""
    reads = [set() for _ in clusters]
    for i, node in enumerate(graph.node):
        for v in node.input:
            if v in producer and cluster_of[producer[v]] != cluster_of[i]:
                reads[cluster_of[i]].add(cluster_of[producer[v]])
    readers = [[] for _ in clusters]
    for c, froms in enumerate(reads):
        for f in froms:
            readers[f].append(c)
    waiting = [len(r) for r in reads]
    ready = [(min(m), c) for c, m in enumerate(clusters) if waiting[c] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, c = heapq.heappop(ready)
        order.append(c)
        for r in readers[c]:
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, (min(clusters[r]), r))
    if len(order) != len(clusters):
        stuck = sorted(c for c in range(len(clusters)) if waiting[c] > 0)
        fail(f"{choice_path}: clusters {stuck[:8]} read from each other (a cluster is not convex)")
    return order


def write_clusters(choice_path, out_dir):
    prepared_dir = os.path.dirname(os.path.abspath(choice_path))
    with open(choice_path) as f:
        clusters = json.load(f)["chosen"]["clusters"]
    with open(os.path.join(prepared_dir, "manifest.json")) as f:
        manifest = json.load(f)
    model = onnx.load(os.path.join(prepared_dir, manifest["prepared"]))
    graph = model.graph
    if len(graph.node) != len(manifest["nodes"]):
        fail(f"{choice_path} was made for {len(manifest['nodes'])} nodes, the prepared model has {len(graph.node)}")
    initializers = {i.name: i for i in graph.initializer}
    types = {v["name"]: (helper.tensor_dtype_to_np_dtype(v["elem_type"]), v["shape"])
             for v in manifest["inputs"] + manifest["values"]}
    cluster_of = {}
    for c, members in enumerate(clusters):
        for i in members:
            if i in cluster_of or not 0 <= i < len(graph.node):
                fail(f"{choice_path}: node {i} is out of range or in two clusters")
            cluster_of[i] = c
    if len(cluster_of) != len(graph.node):
        fail(f"{choice_path}: the clusters leave {len(graph.node) - len(cluster_of)} nodes out")
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    read_outside = set(manifest["outputs"])
    for i, node in enumerate(graph.node):
        for v in node.input:
            if v in producer and cluster_of[producer[v]] != cluster_of[i]:
                read_outside.add(v)
    os.makedirs(out_dir, exist_ok=True)
    nodes = []
    for c in cluster_order(clusters, cluster_of, graph, producer, choice_path):
        members = clusters[c]
        members = sorted(members)  # the manifest's order is topological
        made = {o for i in members for o in graph.node[i].output if o}
        ins, weights, seen = [], [], set()
        for i in members:
            for v in graph.node[i].input:
                if not v or v in seen or v in made:
                    continue
                seen.add(v)
                if v in initializers:
                    weights.append(initializers[v])
                elif v in types:
                    ins.append(v)
                else:
                    fail(f"node {graph.node[i].name!r} reads {v!r}, which nothing produces")
        outs = [o for i in members for o in graph.node[i].output if o and o in read_outside]
        inner = [o for i in members for o in graph.node[i].output if o and o not in read_outside and o in types]
        name = f"cluster{c}"
        sub = helper.make_graph(
            [graph.node[i] for i in members], name,
            [value_info(v, *types[v]) for v in ins],
            [value_info(v, *types[v]) for v in outs],
            initializer=weights,
            value_info=[value_info(v, *types[v]) for v in inner])
        part = helper.make_model(sub, opset_imports=model.opset_import, ir_version=model.ir_version)
        file = f"{c:04}.onnx"
        onnx.save(part, os.path.join(out_dir, file))
        nodes.append({"name": name, "op": "Cluster", "domain": "", "file": file, "inputs": ins, "outputs": outs})
    for key in ("prepared", "call_model"):
        if key in manifest:
            manifest[key] = os.path.relpath(os.path.join(prepared_dir, manifest[key]), out_dir)
    manifest["nodes"] = nodes
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {len(nodes)} cluster models of {len(graph.node)} nodes in {out_dir}")


def write_call_model(model, out_dir):
    """The empty call: one Identity of one float, at the model's opset and IR version."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "call", [x], [y])
    call = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    call.ir_version = model.ir_version
    onnx.checker.check_model(call)
    onnx.save(call, os.path.join(out_dir, "call.onnx"))
    return "call.onnx"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="the model, or with --clusters the partition-T.json gsched-onnx wrote")
    parser.add_argument("out_dir")
    parser.add_argument("--input-shape", default="")
    parser.add_argument("--clusters", action="store_true", help="write one model per cluster")
    args = parser.parse_args()
    if args.clusters:
        write_clusters(args.model, args.out_dir)
        return

    os.makedirs(args.out_dir, exist_ok=True)
    try:
        model = onnx.load(args.model)
    except Exception as e:  # a missing file, or one that is not an ONNX model
        fail(f"cannot read {args.model} as an ONNX model: {e}")
    refuse_other_than_tensors(model.graph)
    fix_input_shape(model, args.input_shape)
    constants_to_initializers(model.graph)
    fixed_path = os.path.join(args.out_dir, "fixed.onnx")
    onnx.save(model, fixed_path)

    prepared_path, level = optimize(fixed_path, args.out_dir)
    prepared = onnx.load(prepared_path)
    inputs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim],
               helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
              for i in graph_inputs(prepared.graph)]
    values = learn_values(prepared, inputs)
    for name, shape, dtype in inputs:
        values[name] = (dtype, tuple(shape))
    nodes = split(prepared, values, args.out_dir)

    produced = {o for n in prepared.graph.node for o in n.output if o}
    manifest = {
        "model": os.path.basename(args.model),
        "optimization": level,
        "prepared": "prepared.onnx",
        "weights_bytes": sum(numpy_helper.to_array(i).nbytes for i in prepared.graph.initializer),
        "inputs": [tensor_entry(name, *values[name]) for name, _, _ in inputs],
        "outputs": [o.name for o in prepared.graph.output],
        "values": [tensor_entry(v, *values[v]) for v in sorted(produced)],
        "nodes": nodes,
        "call_model": write_call_model(prepared, args.out_dir),
    }
    for o in manifest["outputs"]:
        if o not in produced:
            fail(f"graph output {o!r} is not produced by a node (a weight or the input itself)")
    with open(os.path.join(args.out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"prepared {args.model}: {len(nodes)} nodes (optimization level {level}) in {args.out_dir}")


if __name__ == "__main__":
    main()
