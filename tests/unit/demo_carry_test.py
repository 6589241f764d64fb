#!/usr/bin/env python3
"""The demo model's device trip (scripts/demo_model): pack_run.sh returns a finished run in parts that fit
the device's return limit and keeps the rest, named, for a follow-up call; make_carry.sh refuses a carry
that would not travel with the working tree in the device's 64 MiB."""

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "scripts" / "demo_model" / "pack_run.sh"
CARRY = ROOT / "scripts" / "demo_model" / "make_carry.sh"


def md5(data):
    return hashlib.md5(data).hexdigest()


class PackRun(unittest.TestCase):
    def pack(self, payload, part_bytes, return_bytes):
        tmp = Path(tempfile.mkdtemp())
        (tmp / "work" / "run").mkdir(parents=True)
        (tmp / "out").mkdir()
        (tmp / "work" / "run" / "model.pt").write_bytes(payload)
        env = dict(os.environ, PART_BYTES=str(part_bytes), RETURN_BYTES=str(return_bytes))
        res = subprocess.run(["bash", str(PACK), str(tmp / "work"), str(tmp / "out")], env=env,
                             capture_output=True, text=True)
        self.assertEqual(res.returncode, 0, res.stderr)
        return tmp, res.stdout

    def test_over_the_limit_leaves_named_parts_that_join_to_the_run(self):
        payload = os.urandom(50_000)  # random: gzip cannot shrink it below the limit
        tmp, stdout = self.pack(payload, 10_000, 25_000)
        sent = sorted((tmp / "out").iterdir())
        left = sorted((tmp / "work" / "left").iterdir())
        # ~52 KB of tarball in 10 KB parts: 00 and 01 go, 02-04 wait, the short tail (05) still fits
        self.assertEqual([p.name for p in sent][:2], ["demo_run.tar.gz.part00", "demo_run.tar.gz.part01"])
        self.assertEqual([p.name for p in left][0], "demo_run.tar.gz.part02")
        sent_bytes = sum(p.stat().st_size for p in sent)
        self.assertLessEqual(sent_bytes, 25_000)
        for p in left:  # none kept back that would have fitted
            self.assertGreater(sent_bytes + p.stat().st_size, 25_000)
        self.assertIn("LEFT ON THE DEVICE", stdout)
        for p in left:
            self.assertIn(p.name, stdout)
        joined = b"".join(p.read_bytes() for p in sorted(sent + left, key=lambda p: p.name))
        self.assertIn(md5(joined), stdout)  # the printed md5sum checks the joined parts
        self.assertEqual(joined, (tmp / "work" / "demo_run.tar.gz").read_bytes())
        (tmp / "x").mkdir()
        subprocess.run(["tar", "-xz", "-C", str(tmp / "x")], input=joined, check=True)
        self.assertEqual((tmp / "x" / "run" / "model.pt").read_bytes(), payload)

    def test_a_run_that_fits_is_all_returned(self):
        tmp, stdout = self.pack(os.urandom(30_000), 10_000, 60_000)
        self.assertEqual(len(list((tmp / "out").iterdir())), 4)
        self.assertEqual(list((tmp / "work" / "left").iterdir()), [])
        self.assertNotIn("LEFT ON THE DEVICE", stdout)


class CarrySize(unittest.TestCase):
    def carry(self, limit=None):
        data = Path(tempfile.mkdtemp())
        for name in ("brown_train.jsonl", "brown_test.jsonl", "chat_train.jsonl", "chat_test.jsonl",
                     "tool_eval.jsonl"):
            (data / name).write_text("{}\n")
        env = dict(os.environ, CARRY_NAME="demo-carry-size-test")
        if limit is not None:
            env["TRAVEL_LIMIT"] = str(limit)
        try:
            return subprocess.run(["bash", str(CARRY), str(data)], env=env, capture_output=True, text=True)
        finally:
            shutil.rmtree(ROOT / ".carry" / "demo-carry-size-test", ignore_errors=True)

    def test_the_tracked_tree_counts_against_the_limit(self):
        res = self.carry()
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        m = re.search(r"travels: carry (\d+) \+ working tree (\d+) bytes, limit (\d+)", res.stdout)
        self.assertIsNotNone(m, res.stdout)
        carry, tree, limit = map(int, m.groups())
        self.assertEqual(limit, 64 << 20)
        self.assertGreater(tree, (ROOT / "models" / "demo" / "model-00001-of-00001.safetensors").stat().st_size)
        # a limit the carry alone fits but the carry with the tree does not: refused
        res = self.carry(limit=carry + tree - 1)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("over the device's limit", res.stdout)
        self.assertEqual(self.carry(limit=carry + tree).returncode, 0)

    def test_deepen_leaves_its_marker_and_needs_init(self):
        # gpu_train.sh reads the shape from the marker and grows the warm start (deepen.py) before training.
        data = Path(tempfile.mkdtemp())
        for name in ("brown_train.jsonl", "brown_test.jsonl", "chat_train.jsonl", "chat_test.jsonl",
                     "tool_eval.jsonl"):
            (data / name).write_text("{}\n")
        dst = ROOT / ".carry" / "demo-carry-deepen-test"
        env = dict(os.environ, CARRY_NAME=dst.name, DEEPEN="demo-deep")
        try:
            res = subprocess.run(["bash", str(CARRY), str(data), str(ROOT / "models" / "demo")], env=env,
                                 capture_output=True, text=True)
            self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
            self.assertEqual((dst / "deepen").read_text().strip(), "demo-deep")
            self.assertEqual((dst / "init_path").read_text().strip(), "models/demo")
            self.assertTrue((dst / "scripts" / "deepen.py").exists())
            res = subprocess.run(["bash", str(CARRY), str(data)], env=env, capture_output=True, text=True)
            self.assertNotEqual(res.returncode, 0)
            self.assertIn("DEEPEN needs INIT", res.stdout)
        finally:
            shutil.rmtree(dst, ignore_errors=True)
            shutil.rmtree(data, ignore_errors=True)

    def test_untracked_files_travel_too(self):
        # The device sends untracked files git does not ignore; an uncommitted export in models/demo is one.
        probe = ROOT / "tests" / "unit" / f"carry_size_probe_{os.getpid()}.bin"
        before = self.carry()
        try:
            probe.write_bytes(b"x" * 100_000)
            after = self.carry()
        finally:
            probe.unlink()
        size = lambda res: int(re.search(r"working tree (\d+) bytes", res.stdout).group(1))  # noqa: E731
        self.assertEqual(size(after) - size(before), 100_000)


if __name__ == "__main__":
    unittest.main()
