"""Tests of the `tessera` Python module (python/module.cc) on the bundled
examples: load, summary, run on both backends against ONNX Runtime's reference
outputs, errors, export and optimize."""
import os
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

import tessera

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def rel_err(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))


class TesseraModuleTest(unittest.TestCase):
    def setUp(self):
        self.model_path = os.path.join(EXAMPLES, "tiny_cnn.onnx")
        self.x = load_pb(os.path.join(EXAMPLES, "tiny_cnn", "input_0.pb"))
        self.want = load_pb(os.path.join(EXAMPLES, "tiny_cnn", "output_0.pb"))

    def test_summary_describes_the_model(self):
        s = tessera.load(self.model_path).summary()
        self.assertEqual(len(s["inputs"]), 1)
        self.assertEqual(s["inputs"][0]["dtype"], "f32")
        self.assertEqual(list(s["inputs"][0]["shape"]), list(self.x.shape))
        self.assertGreaterEqual(s["ops"]["Conv"], 1)
        self.assertGreater(s["flops"], 0)

    def test_run_matches_onnxruntime_reference_on_both_backends(self):
        m = tessera.load(self.model_path)
        name = m.summary()["inputs"][0]["name"]
        for backend in ("cpu", "reference"):
            out = m.run({name: self.x}, backend=backend)
            self.assertEqual(out[0].shape, self.want.shape)
            self.assertEqual(out[0].dtype, np.float32)
            self.assertLessEqual(rel_err(out[0], self.want), 1e-4, backend)
        # A list in input order works the same.
        self.assertLessEqual(rel_err(m.run([self.x])[0], self.want), 1e-4)

    def test_errors_are_tessera_errors(self):
        with self.assertRaises(tessera.Error) as cm:
            tessera.load("/nonexistent/model.onnx")
        self.assertIn("/nonexistent/model.onnx", str(cm.exception))
        m = tessera.load(self.model_path)
        with self.assertRaises(tessera.Error):
            m.run([np.zeros((2, 2), np.float32)])
        with self.assertRaises(tessera.Error):
            m.run({"no_such_input": self.x})
        with self.assertRaises(tessera.Error):
            m.run([self.x], backend="abacus")

    def test_export_and_optimize_write_models_onnxruntime_runs(self):
        import onnxruntime as ort
        m = tessera.load(self.model_path)
        with tempfile.TemporaryDirectory() as tmp:
            exported = os.path.join(tmp, "exported.onnx")
            m.export(exported)
            sess = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
            got = sess.run(None, {sess.get_inputs()[0].name: self.x})[0]
            self.assertLessEqual(rel_err(got, self.want), 1e-5)

            out_dir = os.path.join(tmp, "opt")
            s = tessera.optimize(m, out_dir, budget=10, measure=False)
            self.assertLessEqual(s["nodes_after"], s["nodes_before"])
            for f in ("model.onnx", "plan.json", "report.txt", "report.json"):
                self.assertTrue(os.path.exists(os.path.join(out_dir, f)), f)
            sess = ort.InferenceSession(os.path.join(out_dir, "model.onnx"), providers=["CPUExecutionProvider"])
            got = sess.run(None, {sess.get_inputs()[0].name: self.x})[0]
            self.assertLessEqual(rel_err(got, self.want), 1e-4)
            # The plan folder loads like a model.
            self.assertLessEqual(rel_err(tessera.load(out_dir).run([self.x])[0], self.want), 1e-4)

    def test_random_inputs_are_seeded(self):
        m = tessera.load(self.model_path)
        a, b, c = m.random_inputs(1), m.random_inputs(1), m.random_inputs(2)
        np.testing.assert_array_equal(a[0], b[0])
        self.assertFalse(np.array_equal(a[0], c[0]))

    def test_list_rules_names_rules(self):
        self.assertIn("merge-matmuls-sharing-input", tessera.list_rules())


if __name__ == "__main__":
    unittest.main()
