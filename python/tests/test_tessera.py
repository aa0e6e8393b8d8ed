"""The tessera package as installed: load, optimize in memory (one device and
a mesh), run, save, verify, cost, rules, errors, and the `tessera` command."""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper, TensorProto

import tessera
from conftest import REPO, load_pb, rel_err

# The tiny transformer's Megatron split (tests/tools/mesh_run_test.cc).
MEGATRON_TP2 = ["qkv_w_5=[S(1)]", "fc1_w_131=[S(1)]", "fc2_w_150=[S(0)]", "proj_w_101=[S(0)]"]


def test_the_package_is_the_installed_one():
    here = os.path.realpath(tessera.__file__)
    assert here.startswith(os.path.realpath(sys.prefix)), here
    assert not here.startswith(os.path.join(os.path.realpath(REPO), "python")), here


def test_load_and_run_match_onnxruntime_on_both_backends(tiny_cnn):
    path, x, want = tiny_cnn
    m = tessera.load(path)
    s = m.summary()
    assert s["inputs"][0]["dtype"] == "f32" and list(s["inputs"][0]["shape"]) == list(x.shape)
    assert s["ops"]["Conv"] >= 1 and s["flops"] > 0
    name = s["inputs"][0]["name"]
    for backend in ("cpu", "reference"):
        out = m.run({name: x}, backend=backend)
        assert out[0].shape == want.shape and out[0].dtype == np.float32
        assert rel_err(out[0], want) <= 1e-4, backend


def test_optimize_a_model_proto_in_memory(tiny_cnn, tmp_path, monkeypatch):
    path, x, want = tiny_cnn
    monkeypatch.chdir(tmp_path)
    plan = tessera.optimize(onnx.load(path), device="cpu", budget=10, seed=3, measure=False)
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert plan.mesh is None
    assert isinstance(plan.model, onnx.ModelProto)
    onnx.checker.check_model(plan.model)
    name = plan.model.graph.input[0].name
    out = plan.run({name: x})
    assert list(out) == [o.name for o in plan.model.graph.output]
    assert rel_err(out[plan.model.graph.output[0].name], want) <= 1e-4
    report = plan.report
    assert report["end_to_end_check"]["passed"] is True
    assert report["nodes_before"] > report["nodes_after"] and "measured" not in report
    assert plan.plan["seed"] == 3 and plan.plan["device"] == report["device"]
    assert plan.report_text.startswith("Tessera optimization report")
    # The mutations are plan.json's, in its order (BatchNorm folds into Conv at least).
    assert [(m["stage"], m["rule"]) for m in plan.mutations] == [
        (m["stage"], m["rule"]) for m in plan.plan["mutations"]]
    assert plan.mutations and all(m["verification"] for m in plan.mutations), plan.mutations
    # The optimized model in ONNX Runtime.
    import onnxruntime as ort
    sess = ort.InferenceSession(plan.model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert rel_err(sess.run(None, {name: x})[0], want) <= 1e-4


def test_runs_from_threads_agree(tiny_cnn):
    """Runs release the GIL and share one compiled plan: concurrent runs take turns."""
    import threading
    path, x, want = tiny_cnn
    plan = tessera.optimize(path, budget=10, measure=False)
    name = plan.model.graph.input[0].name
    first = plan.run({name: x}, threads=1)
    results = []

    def work():
        for _ in range(5):
            results.append(plan.run({name: x}, threads=1))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20
    for r in results:
        for k in first:
            np.testing.assert_array_equal(r[k], first[k])
    assert rel_err(first[plan.model.graph.output[0].name], want) <= 1e-4


def test_save_writes_what_the_plan_holds(tiny_cnn, tmp_path):
    path, x, want = tiny_cnn
    plan = tessera.optimize(path, budget=10, measure=False)
    out = tmp_path / "plan"
    plan.save(out)
    assert sorted(os.listdir(out)) == sorted(plan.files) == sorted(
        ["model.onnx", "plan.json", "report.json", "report.txt", "report.html"])
    # plan.json as the plan holds it, with the digest of each program file written
    written = json.loads((out / "plan.json").read_text())
    files = written.pop("files")
    assert written == json.loads(plan._plan.plan_json)
    assert set(files) == {"model.onnx"} and files["model.onnx"]["bytes"] == (out / "model.onnx").stat().st_size
    assert (out / "report.html").read_text() == plan.report_html
    assert (out / "report.json").read_text() == plan._plan.report_json
    assert (out / "report.txt").read_text() == plan.report_text
    assert (out / "model.onnx").read_bytes() == plan.model.SerializeToString()
    # A plan folder loads like a model; saving again replaces it.
    assert rel_err(tessera.load(str(out)).run([x])[0], want) <= 1e-4
    plan.save(out)
    with pytest.raises(tessera.Error, match="exists and is not a Tessera plan folder"):
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "keep.txt").write_text("x")
        plan.save(tmp_path / "other")
    assert os.listdir(tmp_path / "other") == ["keep.txt"]


def test_optimize_for_a_mesh_gives_one_model_per_rank(tiny_transformer, tmp_path):
    path, x, want = tiny_transformer
    plan = tessera.optimize(path, mesh="tp=2", shards=MEGATRON_TP2, shard_search=False, budget=20)
    assert plan.mesh == "tp=2"
    assert isinstance(plan.model, list) and len(plan.model) == 2
    ops = [n.op_type for n in plan.model[0].graph.node]
    assert "AllReduce" in ops, ops
    out = plan.run({"x": x})
    assert rel_err(out["y"], want[0]) <= 1e-4 and rel_err(out["last"], want[1]) <= 1e-4
    plan.save(tmp_path / "mesh")
    assert sorted(os.listdir(tmp_path / "mesh")) == sorted(plan.files) == sorted(
        ["rank0.onnx", "rank1.onnx", "plan.json", "report.json", "report.txt", "report.html"])
    assert plan.plan["mesh"] == "tp=2"


def matmul_model(w):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm", [x], [y],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_verify_names_the_differing_box():
    w = np.arange(15, dtype=np.float32).reshape(3, 5)
    v = tessera.verify(matmul_model(w), matmul_model(w.copy()))
    assert v and v.equivalent and v.kind == "equivalent" and v.differing == []
    w2 = w.copy()
    w2[:, 2] += 1  # column 2 of the output differs, on every row
    v = tessera.verify(matmul_model(w), matmul_model(w2))
    assert not v and v.kind == "differs"
    assert v.differing == [{"output": 0, "name": "y", "boxes": [((0, 2), (4, 3))]}], v.differing


def test_cost_is_the_cli_json(tiny_cnn, cli):
    path, _, _ = tiny_cnn
    c = tessera.cost(path, device="h100")
    assert c["device"]["name"] == "h100" and c["total_us"] > 0 and c["kernels"]
    import json
    out = subprocess.run([cli, "cost", path, "--device", "h100", "--json"], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout) == c


def test_list_rules():
    rules = tessera.list_rules()
    names = {r["name"] for r in rules}
    assert "merge-matmuls-sharing-input" in names and "conv-winograd" in names
    assert {r["kind"] for r in rules} == {"canonical", "rule"}


def test_errors_carry_the_cli_message(cli, tiny_cnn):
    with pytest.raises(tessera.Error) as e:
        tessera.load("/nonexistent/model.onnx")
    r = subprocess.run([cli, "inspect", "/nonexistent/model.onnx"], capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.strip() == "tessera: error: " + str(e.value)
    assert "/nonexistent/model.onnx" in str(e.value) and e.value.kind == "I/O error"
    path, x, _ = tiny_cnn
    with pytest.raises(tessera.Error, match="unknown device .abacus."):
        tessera.optimize(path, device="abacus", budget=5)
    for mesh in (None, "tp=2"):
        with pytest.raises(tessera.Error, match="--budget must be > 0 seconds, got 0") as e:
            tessera.optimize(path, mesh=mesh, budget=0)
        assert e.value.kind == "usage error"
    with pytest.raises(tessera.Error, match="bad mesh .tp=two."):
        tessera.optimize(path, mesh="tp=two", budget=5)
    with pytest.raises(tessera.Error):
        tessera.load(b"not a model")
    m = tessera.load(path)
    with pytest.raises(tessera.Error, match="no input 'nope'"):
        m.run({m.summary()["inputs"][0]["name"]: x, "nope": x})
    with pytest.raises(tessera.Error):
        m.run([np.zeros((2, 2), np.float32)])


def test_the_cli_is_installed(cli, tiny_cnn, tmp_path):
    path, _, want = tiny_cnn
    out = tmp_path / "opt"
    subprocess.run([cli, "optimize", path, "-o", str(out), "--budget", "10", "--no-measure", "--no-calibrate"], check=True,
                   capture_output=True)
    subprocess.run([cli, "run", str(out), "--input", os.path.join(REPO, "examples", "tiny_cnn", "input_0.pb"),
                    "--output-dir", str(tmp_path / "outputs")], check=True, capture_output=True)
    assert rel_err(load_pb(str(tmp_path / "outputs" / "output_0.pb")), want) <= 1e-4
    # The folder the CLI wrote is the one Plan.save writes: same file set.
    plan = tessera.optimize(path, budget=10, measure=False)
    assert sorted(os.listdir(out)) == sorted(plan.files)


def _cache_step():
    """x [1, 1, 8] -> k = x W as 2 KV heads of 4, written into a cache of 4
    positions [1, 2, 4, 4] at cache_position (ScatterElements, as torch's
    index_copy_ exports), the updated cache returned; y = x W2."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2")
    shape = numpy_helper.from_array(np.array([1, 1, 2, 4], np.int64), "shape")
    at_shape = numpy_helper.from_array(np.array([1, 1, 1, 1], np.int64), "at_shape")
    expand = numpy_helper.from_array(np.array([1, 2, 1, 4], np.int64), "expand")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["k"]),
        helper.make_node("Reshape", ["k", "shape"], ["k4"]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["cache_position", "at_shape"], ["at1"]),
        helper.make_node("Expand", ["at1", "expand"], ["at"]),
        helper.make_node("ScatterElements", ["past", "at", "kt"], ["present"], axis=2),
        helper.make_node("MatMul", ["x", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "cache_step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8]),
         helper.make_tensor_value_info("cache_position", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3]),
         helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, 2, 4, 4])],
        [w, w2, shape, at_shape, expand])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, numpy_helper.to_array(w)


def test_a_session_keeps_the_carried_cache_on_the_ranks():
    model, w = _cache_step()
    split = tessera.optimize(model, mesh="tp=2", shards=["past=[S(1)]"], carry=["present=past"], budget=5,
                             shard_search=False, measure=False)
    whole = tessera.optimize(model, budget=5, measure=False, carry=["present=past"])
    assert split.plan["carry"] == [{"output": "present", "input": "past"}]
    assert split.plan["sharding"]["outputs"]["present"] == "[S(1)]"
    a, b = split.session(threads=1), whole.session(threads=1)
    assert a.carried == [("present", "past")]
    xs = [np.full((1, 1, 8), 0.25 * (p + 1), np.float32) for p in range(3)]
    for p, x in enumerate(xs):
        feeds = {"x": x, "cache_position": np.array([p], np.int64)}
        got, want = a.step(feeds), b.step(feeds)
        assert list(got) == ["y"]  # the cache is carried, not returned
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5)
    assert a.steps == 3
    expected = np.zeros((1, 2, 4, 4), np.float32)
    for p, x in enumerate(xs):
        expected[0, :, p, :] = (x.reshape(1, 8) @ w).reshape(2, 4)
    np.testing.assert_allclose(a.state("past"), expected, rtol=1e-5)
    np.testing.assert_allclose(b.state("past"), expected, rtol=1e-5)
    with pytest.raises(tessera.Error, match="carried tensor 'past'"):
        a.step({"x": xs[0], "cache_position": np.array([0], np.int64), "past": np.zeros((1, 2, 3, 4), np.float32)})
