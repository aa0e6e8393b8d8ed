"""The rank files of a mesh plan are valid ONNX: `tessera optimize --mesh`
on the bundled transformer (1-D and 2-D meshes), then onnx.checker on every
rank<i>.onnx, and the tessera-domain nodes carry the documented attributes
(docs/plans.md); each plan.json matches docs/plan.schema.json
(check_plan_schema, the tests' schema validator)."""
import os
import subprocess
import sys
import tempfile
import unittest

import onnx

TESSERA = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/tessera"
CHECK_SCHEMA = sys.argv.pop(1) if len(sys.argv) > 1 else "build/tests/check_plan_schema"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "examples", "tiny_transformer.onnx")
SPECS = ["qkv_w_5=[S(1)]", "fc1_w_131=[S(1)]", "fc2_w_150=[S(0)]", "proj_w_101=[S(0)]"]
ATTRS = {"AllReduce": set(), "AllGather": {"axis"}, "ReduceScatter": {"axis"},
         "AllToAll": {"split_axis", "concat_axis"}}


class RankFiles(unittest.TestCase):
    def plan(self, mesh, specs):
        out = tempfile.mkdtemp(prefix="tessera-rank-files-")
        args = [TESSERA, "optimize", MODEL, "-o", os.path.join(out, "plan"), "--mesh", mesh, "--no-calibrate"]
        for s in specs:
            args += ["--shard", s]
        subprocess.run(args, check=True, capture_output=True)
        schema = subprocess.run([CHECK_SCHEMA, os.path.join(out, "plan")], capture_output=True, text=True)
        self.assertEqual(schema.returncode, 0, schema.stderr)
        return os.path.join(out, "plan")

    def check(self, plan, ranks):
        seen = 0
        for r in range(ranks):
            model = onnx.load(os.path.join(plan, f"rank{r}.onnx"))
            onnx.checker.check_model(model, full_check=False)
            self.assertIn("tessera", [o.domain for o in model.opset_import])
            for n in model.graph.node:
                if n.domain != "tessera":
                    continue
                seen += 1
                names = {a.name for a in n.attribute}
                self.assertEqual(names, {"mesh_axis", "group_size"} | ATTRS[n.op_type], n.name)
        self.assertGreater(seen, 0)

    def test_tp2(self):
        self.check(self.plan("tp=2", SPECS), 2)

    def test_dp2_tp2(self):
        specs = [s.replace("[S(1)]", "[R,S(1)]").replace("[S(0)]", "[R,S(0)]") for s in SPECS]
        self.check(self.plan("dp=2,tp=2", specs + ["x=[S(1),R]"]), 4)


if __name__ == "__main__":
    unittest.main()
