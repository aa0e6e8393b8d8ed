"""The commands of README.md and docs/*.md run as written.

Every fenced ```sh block of a page is run, block after block in page order,
from a folder laid out as the source tree (its entries linked) whose
`build/` is the build under test, with XDG_CACHE_HOME set to a cache of the
doc tests' own (the suite's other tests never read a calibrated host
profile; these commands, like a user's, calibrate on first use). Each
command (a line, with its `\\` continuations and here-documents) runs in its
own `bash -o pipefail`; the page fails when one exits non-zero (a command
that must fail is written `! cmd`) or runs over --timeout seconds.

A block that is not run is marked on the line just before its fence:

    <!-- doc-test: skip (the reason) -->

Two rewrites, and only these: a leading `bash tools/setup.sh && ` is
dropped (the set-up is what built the tree under test), and `mpirun` gets
`--allow-run-as-root --oversubscribe`, as the suite's other mpirun tests.

    doc_commands_test.py SOURCE_DIR BUILD_DIR PAGE.md [--timeout S]
    doc_commands_test.py --pages SOURCE_DIR PAGE.md...   (every page is listed)
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"^<!--\s*doc-test:\s*skip\s*\((.+)\)\s*-->\s*$")
MARKER = re.compile(r"<!--\s*doc-test")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
SETUP = "bash tools/setup.sh && "


class PageError(Exception):
    pass


def sh_blocks(text, page):
    """(line number, block text, skip reason or None) of every ```sh block."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if MARKER.search(lines[i]) and not SKIP.match(lines[i]):
                raise PageError(f"{page}:{i + 1}: a doc-test marker must read <!-- doc-test: skip (REASON) -->")
            i += 1
            continue
        start, lang = i, m.group(1)
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        if i == len(lines):
            raise PageError(f"{page}:{start + 1}: a code block is not closed")
        prev = lines[start - 1] if start > 0 else ""
        skip = SKIP.match(prev)
        if skip and lang != "sh":
            raise PageError(f"{page}:{start}: a skip marker before a ```{lang} block (only sh blocks run)")
        if lang == "sh":
            blocks.append((start + 1, "\n".join(lines[start + 1:i]), skip.group(1) if skip else None))
        i += 1
    return blocks


def commands(block):
    """The block's commands: lines joined over `\\` continuations and
    here-documents; blank lines and comment lines left out."""
    out, lines, i = [], block.split("\n"), 0
    while i < len(lines):
        cmd = [lines[i]]
        i += 1
        if not cmd[0].strip() or cmd[0].lstrip().startswith("#"):
            continue
        while cmd[-1].endswith("\\") and i < len(lines):
            cmd.append(lines[i])
            i += 1
        doc = HEREDOC.search("\n".join(cmd))
        if doc:
            while i < len(lines):
                cmd.append(lines[i])
                i += 1
                if cmd[-1].strip() == doc.group(2):
                    break
            else:
                raise PageError("a here-document is not closed: " + cmd[0])
        out.append("\n".join(cmd))
    return out


def as_run(cmd):
    if cmd.startswith(SETUP):
        cmd = cmd[len(SETUP):]
    return re.sub(r"\bmpirun\b", "mpirun --allow-run-as-root --oversubscribe", cmd)


def tree(source, build):
    """A folder laid out as the source tree, with build/ the build under test."""
    work = tempfile.mkdtemp(prefix="tessera-doc-commands-")
    for entry in os.listdir(source):
        if entry not in ("build", ".git"):
            os.symlink(os.path.join(os.path.abspath(source), entry), os.path.join(work, entry))
    os.symlink(os.path.abspath(build), os.path.join(work, "build"))
    return work


def run_command(cmd, cwd, env, timeout):
    """The finished process (output in .stdout), or None when it ran over
    `timeout`: then it and everything it started are killed."""
    p = subprocess.Popen(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        print(out)
        return None
    return subprocess.CompletedProcess(p.args, p.returncode, out)


def run_page(source, build, page, timeout):
    with open(os.path.join(source, page), encoding="utf-8") as f:
        blocks = sh_blocks(f.read(), page)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(os.path.abspath(build), "doc-test-cache"))
    work = tree(source, build)
    ran = skipped = 0
    try:
        for line, block, skip in blocks:
            if skip:
                print(f"{page}:{line}: skipped ({skip})")
                skipped += 1
                continue
            for cmd in commands(block):
                run = as_run(cmd)
                print(f"{page}:{line}: $ {run}", flush=True)
                t0 = time.monotonic()
                r = run_command(run, work, env, timeout)
                if r is None:
                    raise PageError(f"{page}:{line}: over {timeout:g} s: {cmd}")
                print(r.stdout, end="" if r.stdout.endswith("\n") or not r.stdout else "\n")
                print(f"  ({time.monotonic() - t0:.1f} s, exit {r.returncode})", flush=True)
                if r.returncode != 0:
                    raise PageError(f"{page}:{line}: exit {r.returncode}: {cmd}")
                ran += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{page}: {ran} commands ran, {skipped} blocks skipped")
    if ran == 0 and blocks:
        raise PageError(f"{page}: every block is skipped")


def check_pages(source, pages):
    """Every page with commands is one of the tests' pages."""
    present = {"README.md"} | {os.path.relpath(p, source) for p in glob.glob(os.path.join(source, "docs", "*.md"))}
    missing = sorted(present - set(pages))
    if missing:
        raise PageError("pages the doc tests do not run (tests/docs/CMakeLists.txt): " + ", ".join(missing))
    gone = sorted(set(pages) - present)
    if gone:
        raise PageError("pages the doc tests name that do not exist: " + ", ".join(gone))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--pages":
        check_pages(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("build")
    ap.add_argument("page")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    run_page(a.source, a.build, a.page, a.timeout)


if __name__ == "__main__":
    try:
        main()
    except PageError as e:
        print("doc-test: FAILED: " + str(e), file=sys.stderr)
        sys.exit(1)
