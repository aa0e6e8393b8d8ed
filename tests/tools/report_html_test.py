"""report.html, as `tessera optimize` writes it: one self-contained file (no
script, nothing fetched), whose SVG parts are well-formed XML, that names
every search mutation of plan.json (its rule in the picture, its subprogram
in a mark's data-subprograms) and every collective (by node name), shows
the end-to-end check's tolerance, and renders in headless Chromium
(bench/report/screenshot.sh; tools/setup.sh installs Chromium, and the test
fails without it) into a picture that is not blank: the plan's boxes, the
charts and their colours give a rendered report hundreds of colours, where
a blank page has one (the test checks that a blank page fails the check).
The plans the test writes also match docs/plan.schema.json.

    report_html_test.py TESSERA CHECK_PLAN_SCHEMA"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TESSERA = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/tessera"
CHECK_SCHEMA = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin/check_plan_schema"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
SVG = "{http://www.w3.org/2000/svg}"
# A rendered report against a blank page (one colour) or a page of black
# text (its antialiasing's grey levels, at most 256, nothing chromatic).
# Measured on 1000x700 screenshots, Chromium 156: blank 1 colour; a page of
# text and a table 249 colours, 0% chromatic; reports of the bundled CNN
# (h100) 1162 colours, 0.37% chromatic; the tp=2 transformer 1433, 0.36%;
# the stacked sums (a100) 1788, 3.0%.
kMinColours = 400
kMinChromatic = 0.001


def stacked_sums(path, layers=4, m=64, k=512):
    """`layers` identical layers tanh(x @ Wa + x @ Wb): the search rewrites
    each sum as x @ (Wa + Wb) (matmul-distribute-add), so the picture has a
    repeated block whose ops a mutation wrote."""
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i in range(layers):
        for w in ("a", "b"):
            data = (rng.standard_normal((k, k)) * 0.05).astype(np.float32)
            inits.append(numpy_helper.from_array(data, f"w{i}{w}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}a"], [f"a{i}"], name=f"l{i}/mm_a"),
                  helper.make_node("MatMul", [x, f"w{i}b"], [f"b{i}"], name=f"l{i}/mm_b"),
                  helper.make_node("Add", [f"a{i}", f"b{i}"], [f"s{i}"], name=f"l{i}/add"),
                  helper.make_node("Tanh", [f"s{i}"], [f"t{i}"], name=f"l{i}/tanh")]
        x = f"t{i}"
    graph = helper.make_graph(nodes, "stacked_sums", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [m, k])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def png_pixels(path):
    """(width, height, rows of RGB(A) byte tuples) of an 8-bit RGB or RGBA,
    non-interlaced PNG (what Chromium writes), decoded with zlib alone."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(path + " is not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    depth, color, interlace = header[8], header[9], header[12]
    if depth != 8 or color not in (2, 6) or interlace != 0:
        raise ValueError(f"{path}: depth {depth}, colour type {color}, interlace {interlace}: not read here")
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def picture_colours(path):
    """(distinct colours, share of chromatic pixels) of a screenshot."""
    _, _, rows = png_pixels(path)
    colours, chromatic, total = set(), 0, 0
    for row in rows:
        colours.update(row)
        chromatic += sum(1 for p in row if max(p) - min(p) > 40)
        total += len(row)
    return len(colours), chromatic / total


class Tags(html.parser.HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def svg_parts(text):
    parts = re.findall(r"<svg\b.*?</svg>", text, re.S)
    return [ET.fromstring(p) for p in parts]


def svg_text(root):
    return "\n".join(t for el in root.iter() for t in (el.text, el.tail) if t)


class ReportHtml(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-report-html-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def optimize(self, name, model, *flags):
        out = os.path.join(self.tmp, name)
        subprocess.run([TESSERA, "optimize", model, "-o", out, *flags], check=True, capture_output=True)
        schema = subprocess.run([CHECK_SCHEMA, out], capture_output=True, text=True)
        self.assertEqual(schema.returncode, 0, schema.stderr)
        with open(os.path.join(out, "plan.json")) as f:
            plan = json.load(f)
        with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
            text = f.read()
        return out, plan, text

    def check_self_contained(self, text):
        tags = Tags()
        tags.feed(text)
        tags.close()
        names = [t for t, _ in tags.tags]
        self.assertEqual(names[0], "html")
        for tag, attrs in tags.tags:
            self.assertNotIn(tag, ("script", "link", "img", "iframe", "object", "embed"), tag)
            for key in ("src", "href", "xlink:href"):
                self.assertFalse(key in attrs and not attrs[key].startswith("#"), (tag, attrs))
        for url in re.findall(r"url\(([^)]*)\)", text):
            self.assertTrue(url.startswith("#"), url)
        self.assertNotIn("@import", text)
        parts = svg_parts(text)
        for p in parts:
            self.assertEqual(p.tag, SVG + "svg")
        pictures = [p for p in parts if p.get("class") == "plan"]
        charts = [p for p in parts if p.get("class") == "chart"]
        self.assertEqual(len(pictures), 1)
        self.assertTrue(charts)  # the kernel classes, and for a searched mesh the degree curve
        return pictures[0]

    def test_single_device_plan(self):
        model = os.path.join(self.tmp, "stacked_sums.onnx")
        stacked_sums(model)
        out, plan, text = self.optimize("sums", model, "--device", "a100", "--budget", "20")
        picture = self.check_self_contained(text)
        search = [m for m in plan["mutations"] if m["stage"] == "search"]
        self.assertEqual(len(search), 4, "the test needs a plan with a search mutation in every layer")
        self.assertIn("repeated", svg_text(picture))
        marked = set()
        for el in picture.iter():
            marked.update(int(s) for s in el.get("data-subprograms", "").split())
        words = svg_text(picture)
        for m in search:
            self.assertIn(m["subprogram"], marked, m)
            self.assertIn(m["rule"], words, m)
        for m in plan["mutations"]:
            self.assertIn(m["rule"], text)
        check = plan["end_to_end_check"]
        self.assertIn("atol", text)
        self.assertIn("%.3g" % check["atol"], text)
        self.assertIn("%.3g" % check["rtol"], text)
        self.assert_not_blank(out, "sums")

    def test_cnn_plan_names_its_canonical_passes(self):
        out, plan, text = self.optimize("cnn", os.path.join(EXAMPLES, "tiny_cnn.onnx"), "--device", "h100",
                                        "--budget", "10")
        self.check_self_contained(text)
        for m in plan["mutations"]:
            self.assertIn(m["rule"], text)
        self.assert_not_blank(out, "cnn")

    def test_mesh_plan(self):
        # Split as Megatron does: the model is too small for the search to split it.
        specs = ["qkv_w_5=[S(1)]", "fc1_w_131=[S(1)]", "fc2_w_150=[S(0)]", "proj_w_101=[S(0)]"]
        out, plan, text = self.optimize("mesh", os.path.join(EXAMPLES, "tiny_transformer.onnx"), "--mesh", "tp=2",
                                        "--device", "h100", *[a for s in specs for a in ("--shard", s)])
        self.assertEqual(len(plan["ranks"]), 2)
        picture = self.check_self_contained(text)
        self.assertTrue(plan["collectives"])
        words = svg_text(picture)
        for c in plan["collectives"]:
            self.assertIn(c["name"], words, c)
        for r in range(len(plan["ranks"])):
            self.assertIn(f"rank {r}", words)
        if plan["search"]:
            self.assertIn("Degree curve", text)
        self.assert_not_blank(out, "mesh")

    def screenshot(self, plan_dir, name):
        """The report rendered in Chromium: (distinct colours, chromatic share)."""
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        self.assertTrue(browser, "chromium is not installed: bash tools/setup.sh installs it (apt-get install chromium)")
        png = os.path.join(self.tmp, name + ".png")
        r = subprocess.run([os.path.join(ROOT, "bench", "report", "screenshot.sh"), "--size", "1000x700", plan_dir, png],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return picture_colours(png)

    def assert_not_blank(self, plan_dir, name):
        colours, chromatic = self.screenshot(plan_dir, name)
        print(f"{name}: the screenshot has {colours} colours, {chromatic:.1%} of its pixels chromatic", file=sys.stderr)
        self.assertGreaterEqual(colours, kMinColours, f"{name}: the rendered report looks blank")
        self.assertGreaterEqual(chromatic, kMinChromatic, f"{name}: the rendered report has no coloured boxes")

    def test_a_blank_page_fails_the_screenshot_check(self):
        for name, body in (("blank", ""), ("text", "<p>" + "plan report text " * 200 + "</p>")):
            folder = os.path.join(self.tmp, name)
            os.makedirs(folder)
            with open(os.path.join(folder, "report.html"), "w") as f:
                f.write(f"<!doctype html><html><body>{body}</body></html>")
            colours, chromatic = self.screenshot(folder, name)
            self.assertTrue(colours < kMinColours or chromatic < kMinChromatic, (name, colours, chromatic))


if __name__ == "__main__":
    unittest.main()
