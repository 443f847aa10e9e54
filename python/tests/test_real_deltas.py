"""bench/real_deltas.py on a toy Qwen3: real AdamW steps, every delta applied back
bit for bit (the script exits otherwise), and figures in their ranges."""
import importlib.util
import json
import pathlib

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "real_deltas.py"


def load():
    spec = importlib.util.spec_from_file_location("real_deltas", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_real_deltas_tiny(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert load().main(["--shape", "tiny", "--steps", "3", "--lrs", "1e-5,1e-3", "--batch", "2", "--seq", "16",
                        "--device", "cpu", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["lr"], r["step"]) for r in rows] == [(lr, s) for lr in (1e-5, 1e-3) for s in (1, 2, 3)]
    for r in rows:
        assert 0 < r["changed"] <= r["elements"] and 0 < r["density"] <= 1
        assert 0 < r["bytes_per_changed"] < 4 and 0 <= r["unit_share"] <= 1
        assert 0 < r["bytes_per_changed_format2"] < 4
    # a larger step changes more weights
    assert rows[4]["density"] > rows[1]["density"]
    table = capsys.readouterr().out
    assert "| lr | step | changed |" in table and "B per changed element" in table


def test_real_deltas_refuses_bad_arguments():
    with pytest.raises(SystemExit):
        load().main(["--steps", "1"])
