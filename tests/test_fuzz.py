"""Property-based fuzzing: random valid models embedding norm / FC patterns next to traps.

Each example is a model stitched from pieces (tests/fuzz/pieces.py) that knows how many
fusions of each rule it must give; tests/fuzz/properties.py says what must hold of the fused
model.  A failure, once hypothesis has shrunk it, is saved to tests/regressions/ (model + the
counts it must give) and tests/test_regressions.py replays it from then on.

The number of examples comes from the hypothesis profile (tests/conftest.py): 200 by
default, 10 000 with HYPOTHESIS_PROFILE=ci.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import Phase, event, given, note, seed, settings
from hypothesis.control import current_build_context

import pytest

from .fuzz import properties
from .fuzz.spec import ENABLED_FAMILIES, TROUBLE_FAMILIES, build
from .fuzz.trouble import FAMILIES
from .fuzz.strategies import model_specs

ROOT = Path(__file__).resolve().parents[1]


def _final() -> bool:
    """Whether this is hypothesis's last run of the (shrunk) failing example."""
    try:
        return bool(current_build_context().is_final)
    except Exception:  # an API change: save every failure rather than none
        return True


@given(spec=model_specs())
def test_fused_models_keep_every_property(spec):
    case = build(spec)
    for rule, n in sorted(case.expected.items()):
        event(f"expected {rule} x{n}")
    if not case.expected:
        event("expected nothing to fuse")
    try:
        properties.check(case)
    except properties.GeneratorBug:
        raise  # a bug in tests/fuzz: nothing to save
    except Exception as e:
        if _final():
            path = properties.save_regression(case, e)
            note(f"saved the failing model as {path} (commit it: tests/test_regressions.py replays it)")
        raise
    if case.bare is not None and case.bare != case.expected:
        event("refused: no function body serves both element types below opset 15")


@pytest.mark.parametrize("family", TROUBLE_FAMILIES)
def test_trouble_families_fuse_to_the_same_function_or_not_at_all(family):
    """tests/fuzz/trouble.py: one family of issue 16's shapes of trouble per run."""
    if family not in ENABLED_FAMILIES:
        pytest.skip(f"{family}: switched off in tests/fuzz/spec.py ENABLED_FAMILIES (FUZZ_FAMILIES=all runs it)")
    # A fiftieth of the profile's examples per family (20 by default, 200 in CI): nine
    # families, each example two verify runs.
    examples = max(20, settings.default.max_examples // 50)

    @settings(max_examples=examples, deadline=None)
    @given(case=FAMILIES[family]())
    def run(case):
        event(case.what)
        properties.check_semantics(case)

    run()


def _sample_models(n: int) -> list[bytes]:
    """``n`` fuzz models, the same ones every run."""
    out: list[bytes] = []

    @seed(20240611)
    @settings(max_examples=n, phases=[Phase.generate], database=None, deadline=None)
    @given(spec=model_specs())
    def collect(spec):
        out.append(build(spec).model.SerializeToString())

    collect()
    return out[:n]


_DIGESTS = """
import hashlib, sys
import onnx, fusion
from tests.builders import NORM_FC_PASSES
for path in sys.argv[1:]:
    fused = fusion.run(onnx.load(path), NORM_FC_PASSES).model
    print(hashlib.sha256(fused.SerializeToString()).hexdigest())
"""


def test_two_processes_give_identical_bytes(tmp_path):
    """Determinism beyond one process: other hash seeds (set/dict orders) give the same bytes."""
    paths = []
    for i, data in enumerate(_sample_models(24)):
        p = tmp_path / f"m{i}.onnx"
        p.write_bytes(data)
        paths.append(str(p))
    digests = []
    for hash_seed in ("1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(ROOT))
        r = subprocess.run([sys.executable, "-c", _DIGESTS, *paths], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        digests.append(r.stdout.split())
    assert len(digests[0]) == len(paths)
    assert digests[0] == digests[1]
