"""doc_commands_test.py itself: a page whose command fails, or runs too
long, fails; markers are read as documented; commands are split over
continuations and here-documents; the two rewrites are the only ones."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_commands_test as dc  # noqa: E402


class DocCommands(unittest.TestCase):
    def setUp(self):
        self.src = tempfile.mkdtemp(prefix="tessera-doc-selftest-")
        os.makedirs(os.path.join(self.src, "docs"))
        self.build = tempfile.mkdtemp(prefix="tessera-doc-selftest-build-")

    def tearDown(self):
        shutil.rmtree(self.src, ignore_errors=True)
        shutil.rmtree(self.build, ignore_errors=True)

    def page(self, text, name="docs/page.md"):
        with open(os.path.join(self.src, name), "w") as f:
            f.write(text)
        return name

    def run_page(self, text, timeout=20):
        dc.run_page(self.src, self.build, self.page(text), timeout)

    def test_a_page_that_works_passes(self):
        self.run_page("# x\n\n```sh\ntrue\n! false\ntest -d build && test -d docs\n```\n")

    def test_a_failing_command_fails_the_page_naming_its_line(self):
        with self.assertRaisesRegex(dc.PageError, r"docs/page.md:5: exit 3: exit 3"):
            self.run_page("# x\n\ntext\n\n```sh\ntrue\nexit 3\n```\n")

    def test_a_command_expected_to_fail_that_succeeds_fails(self):
        with self.assertRaisesRegex(dc.PageError, "exit 1"):
            self.run_page("```sh\n! true\n```\n")

    def test_a_failure_inside_a_pipe_fails(self):
        with self.assertRaises(dc.PageError):
            self.run_page("```sh\nfalse | cat\n```\n")

    def test_a_slow_command_fails(self):
        with self.assertRaisesRegex(dc.PageError, "over 1 s"):
            self.run_page("```sh\nsleep 5\n```\n", timeout=1)

    def test_skipped_blocks_and_other_languages_do_not_run(self):
        self.run_page("<!-- doc-test: skip (slow) -->\n```sh\nfalse\n```\n\n```text\nfalse\n```\n\n"
                      "```python\nraise SystemExit(1)\n```\n\n```sh\ntrue\n```\n")

    def test_a_marker_without_a_reason_is_an_error(self):
        with self.assertRaisesRegex(dc.PageError, "must read"):
            self.run_page("<!-- doc-test: skip -->\n```sh\nfalse\n```\n")

    def test_a_page_whose_every_block_is_skipped_fails(self):
        with self.assertRaisesRegex(dc.PageError, "every block is skipped"):
            self.run_page("<!-- doc-test: skip (slow) -->\n```sh\ntrue\n```\n")

    def test_commands_span_continuations_and_here_documents(self):
        block = "a \\\n  b\n# comment\n\npython3 - <<'EOF'\nprint(1)\nEOF\nc"
        self.assertEqual(dc.commands(block), ["a \\\n  b", "python3 - <<'EOF'\nprint(1)\nEOF", "c"])
        self.run_page("```sh\npython3 - <<'EOF'\nimport sys\nsys.exit(0)\nEOF\n! python3 - <<'EOF'\nimport sys\n"
                      "sys.exit(4)\nEOF\n```\n")

    def test_the_two_rewrites(self):
        self.assertEqual(dc.as_run("bash tools/setup.sh && ctest x"), "ctest x")
        self.assertEqual(dc.as_run("mpirun -np 2 a"), "mpirun --allow-run-as-root --oversubscribe -np 2 a")
        self.assertEqual(dc.as_run("echo bash tools/setup.sh && x"), "echo bash tools/setup.sh && x")

    def test_every_page_must_be_listed(self):
        self.page("x", "README.md")
        self.page("y", "docs/a.md")
        dc.check_pages(self.src, ["README.md", "docs/a.md"])
        with self.assertRaisesRegex(dc.PageError, "docs/a.md"):
            dc.check_pages(self.src, ["README.md"])


if __name__ == "__main__":
    unittest.main()
