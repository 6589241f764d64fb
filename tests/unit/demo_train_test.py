#!/usr/bin/env python3
"""train.py's rows per forward across calls: the steps before the quantisation-aware phase and that phase keep
separate counts, so a QAT phase that starts in a later call begins at the full --batch (halving only if it runs
out of memory itself) instead of inheriting the count the earlier, differently shaped steps fell to. Round 15's
compiled steps ran 128 rows and its eager QAT phase, sharing one count, fell to 8 (53 steps in 2.8 min).
Needs torch (reruns itself under /usr/bin/python3, Debian's python3-torch, else skipped saying so)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "demo_model"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    import torch
except ImportError:
    torch = None
    other = "/usr/bin/python3"
    if (os.path.realpath(sys.executable) != os.path.realpath(other) and os.path.exists(other) and
            subprocess.run([other, "-c", "import torch"], capture_output=True).returncode == 0):
        os.execv(other, [other, __file__] + sys.argv[1:])

ONECARD = os.environ.get("ONECARD_BIN", "")


@unittest.skipUnless(torch is not None and ONECARD and os.path.exists(ONECARD),
                     "needs torch and ONECARD_BIN (ctest sets it; onecard tokenizes for train.py here)")
class QatRowsPerForward(unittest.TestCase):
    def test_a_later_calls_qat_phase_starts_at_the_full_batch(self):
        from demo_tie_test import EOS, small_tokenizer
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "tok.json").write_text(json.dumps(small_tokenizer(), ensure_ascii=False))
            data = d / "data"
            data.mkdir()
            chats = [{"prompt": f"<｜begin▁of▁sentence｜><｜User｜>the {w} then<｜Assistant｜></think>",
                      "completion": f"the {w} there." + EOS, "kind": "chat"} for w in ("sea", "thin", "other")]
            (data / "chat_train.jsonl").write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in chats))
            (data / "brown_train.jsonl").write_text(json.dumps({"text": "the thing the other thought"}) + "\n")
            env = dict(os.environ, ONECARD_BIN=ONECARD, OMP_NUM_THREADS="2")
            base = [sys.executable, str(ROOT / "scripts" / "demo_model" / "train.py"), "--data", str(data),
                    "--tokenizer", str(d / "tok.json"), "--shape", "dry", "--seq", "64", "--batch", "2",
                    "--minutes", "5", "--warmup", "1", "--device", "cpu", "--state-dir", str(d / "keep")]
            # Call 1 stands for steps that fell to 1 row per forward; call 2 (no --micro) enters the QAT phase
            # at step 2 of 4 (--max-steps sets the schedule's fraction).
            calls = ((["--micro", "1", "--qat-frac", "0", "--max-steps", "2"], "run1"),
                     (["--qat-frac", "0.5", "--max-steps", "4"], "run2"))
            for extra, out in calls:
                r = subprocess.run(base + extra + ["--out", str(d / out)], env=env, capture_output=True, text=True,
                                   timeout=600)
                self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
            self.assertIn("continuing from", r.stdout)
            self.assertIn("step 2: quantisation-aware phase starts", r.stdout)
            first = json.loads((d / "run1" / "train_meta.json").read_text())
            meta = json.loads((d / "run2" / "train_meta.json").read_text())
            self.assertEqual((first["micro"], first["qat_from_step"]), (1, None))
            self.assertEqual((meta["steps"], meta["qat_from_step"]), (4, 2))
            self.assertEqual((meta["micro"], meta["qat_micro"]), (1, 2))  # the QAT phase ran the whole batch
            self.assertFalse(meta["compiled"])


if __name__ == "__main__":
    unittest.main()
