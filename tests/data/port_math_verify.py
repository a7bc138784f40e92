"""Regenerate ``math_verify_cases.json`` from a checkout of Math-Verify's repository.

    python tests/data/port_math_verify.py /path/to/Math-Verify [COMMIT] > tests/data/math_verify_cases.json

Collects every parametrized case of the test files below with pytest (nothing is run), and records
each with its source (file, test, case id) and the settings its test function passes to
``compare_strings`` / ``parse``+``verify``. ``tests/test_math_verify_port.py`` maps them onto our
answer format. Math-Verify is MIT-licensed (Copyright (c) 2024 The HuggingFace Team).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# test function -> the settings it passes (Math-Verify's compare_strings defaults otherwise:
# match_types latex+expr, precision 6, strict True, allow_set_relation_comp False).
SETTINGS = {
    "test_number_extraction": {"match_types": ["expr"]},
    "test_latex_notation": {"match_types": ["latex"]},
    "test_latex_notation_math": {"match_types": ["latex"]},
    "test_relations_math": {"match_types": ["latex"]},
    "test_matrix_extraction": {"match_types": ["latex"]},
    "test_set_rel_assymetry": {"match_types": ["latex"]},
    "test_float_precision": {"precision": 5},
    "test_sqrt_precision": {"precision": 5},
    "test_symbols": {"precision": 5},
    # plain parse()/verify() with Math-Verify's default extraction (boxed priority 50)
    "tests/test_yujianll.py::test_string_extraction": {"api": "parse_verify"},
}
FILES = [
    "tests/test_all.py",
    "tests/test_boxed.py",
    "tests/test_numina_cases.py",
    "tests/test_open_thoughts.py",
    "tests/test_strict.py",
    "tests/test_yujianll.py",
]

PLUGIN = """
import json
def pytest_collection_modifyitems(session, config, items):
    out = []
    for item in items:
        cs = getattr(item, "callspec", None)
        if cs is None:
            continue
        params = {k: v for k, v in cs.params.items() if isinstance(v, (str, int, float, bool, type(None)))}
        out.append({"nodeid": item.nodeid, "params": params})
    with open(config.getoption("--dump"), "w") as f:
        json.dump(out, f)
def pytest_addoption(parser):
    parser.addoption("--dump")
"""


def main(repo: Path, commit: str | None = None) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "dump_plugin.py").write_text(PLUGIN)
        dump = Path(tmp, "cases.json")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "--collect-only",
                "-p",
                "dump_plugin",
                f"--dump={dump}",
                *FILES,
            ],
            cwd=repo,
            env={"PYTHONPATH": f"{tmp}:{repo}", "PATH": "/usr/bin:/bin"},
            check=True,
            capture_output=True,
        )
        items = json.loads(dump.read_text())
    rev = (
        commit
        or subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
        ).stdout.strip()
    )
    cases = []
    for item in items:
        file, _, rest = item["nodeid"].partition("::")
        func = rest.split("[", 1)[0]
        p = dict(item["params"])
        case = {
            "source": item["nodeid"],
            "gold": p.pop("gold"),
            "pred": p.pop("pred"),
            "expected": int(p.pop("expected", p.pop("result", 0))),
            "match_types": ["latex", "expr"],
            "precision": 6,
            "strict": True,
            "allow_set_relation_comp": False,
            "api": "compare_strings",
        }
        case.update(SETTINGS.get(func, {}))
        case.update(SETTINGS.get(f"{file}::{func}", {}))
        case.update({k: p[k] for k in ("precision", "strict", "allow_set_relation_comp") if k in p})
        cases.append(case)
    header = {
        "source": "https://github.com/huggingface/Math-Verify",
        "commit": rev,
        "license": "MIT, Copyright (c) 2024 The HuggingFace Team",
        "generated_by": "tests/data/port_math_verify.py",
    }
    json.dump({"about": header, "cases": cases}, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
