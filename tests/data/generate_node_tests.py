#!/usr/bin/env python3
"""Writes ONNX's backend node tests (model.onnx + test_data_set_0/{input,output}_N.pb)
into OUT/<test name>/, from the test cases the installed onnx package defines.

The pip onnx wheel ships the case definitions but not the generated data, and its
`backend-test-tools generate-data` only writes the model tests, so this collects the
node cases with onnx.backend.test.case.node and writes them in the layout ONNX's own
data folder uses. Idempotent: a stamp file records the onnx version, and a folder that
is already complete for that version is left alone (a rerun takes well under a second).

Exit status: 0 written or already there, 2 onnx missing (the C++ test skips).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import warnings

STAMP = "GENERATED_BY_ONNX"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", required=True, help="output folder")
    parser.add_argument("--force", action="store_true", help="regenerate even if up to date")
    args = parser.parse_args()

    try:
        import numpy as np  # noqa: F401
        import onnx
        from onnx import TensorProto, numpy_helper
        import onnx.backend.test.case.node as node_cases
    except ImportError as e:
        print(f"generate_node_tests: onnx/numpy not importable ({e})", file=sys.stderr)
        return 2

    stamp_path = os.path.join(args.out, STAMP)
    if not args.force and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if f.read().strip() == onnx.__version__:
                return 0

    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    # A private temporary folder renamed into place: a reader never sees a half
    # written set, and two concurrent runs do not collide.
    tmp = f"{args.out}.tmp{os.getpid()}"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)

    with warnings.catch_warnings():
        # Some case definitions overflow on purpose (Cast to narrow types).
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases()

    written = 0
    for case in cases:
        model = case.model
        # Sequence, map and optional values are outside Tessera's IR; their
        # cases are not written (the C++ harness would skip them anyway).
        values = list(model.graph.input) + list(model.graph.output)
        if any(not v.type.HasField("tensor_type") for v in values):
            continue
        case_dir = os.path.join(tmp, case.name)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            set_dir = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(set_dir)
            for kind, arrays, infos in (("input", inputs, model.graph.input),
                                        ("output", outputs, model.graph.output)):
                for j, arr in enumerate(arrays):
                    proto = arr if isinstance(arr, TensorProto) else \
                        numpy_helper.from_array(arr, infos[j].name)
                    with open(os.path.join(set_dir, f"{kind}_{j}.pb"), "wb") as f:
                        f.write(proto.SerializeToString())
        written += 1

    with open(os.path.join(tmp, STAMP), "w") as f:
        f.write(onnx.__version__ + "\n")
    try:
        os.rename(tmp, args.out)
    except OSError:  # another run finished first
        shutil.rmtree(tmp)
    print(f"generate_node_tests: wrote {written} of {len(cases)} node tests to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
