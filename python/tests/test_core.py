"""Model, Layout, errors and tensors in: the extension's basic objects."""
import numpy as np
import pytest
import torch

import ferry


def test_errors_carry_status_and_detail():
    with pytest.raises(ferry.ConfigError) as e:
        ferry.Model.from_json("{}")
    assert e.value.status == ferry.Status.INVALID_CONFIG == 101
    assert e.value.status_name == "FERRY_ERR_INVALID_CONFIG"
    assert "model_type" in e.value.detail
    assert isinstance(e.value, ValueError) and isinstance(e.value, ferry.Error)
    assert issubclass(ferry.TimeoutError, TimeoutError)
    assert issubclass(ferry.PeerLostError, ConnectionError)


def test_model_from_bundled_name_file_and_dict(tmp_path):
    m = ferry.Model.from_config("qwen3-0.6b")
    assert m.param_count == 596049920 and m.family == "dense" and m.dtype == "BF16"
    assert "model.embed_tokens.weight" in m and "nope" not in m
    assert m.tensor("model.norm.weight").shape == (1024,)
    with pytest.raises(ferry.NotFoundError):
        m.tensor("nope")
    assert "qwen3-0.6b" in ferry.bundled_models()
    cfg = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000, "intermediate_size": 128,
           "tie_word_embeddings": False, "dtype": "float32"}
    d = ferry.Model.from_config(cfg, name="tiny")
    assert d.name == "tiny" and d.dtype == "F32" and len(d) == 2 * 11 + 3
    p = tmp_path / "config.json"
    import json
    p.write_text(json.dumps(cfg))
    f = ferry.Model.from_config(str(p), dtype="bfloat16")
    assert f.dtype == "BF16" and f.param_count == d.param_count
    with pytest.raises(ferry.NotFoundError, match="not a bundled name"):
        ferry.Model.from_config("no-such-model")
    with pytest.raises(TypeError):
        ferry.Model()


def test_custom_model_and_layout_validation():
    m = ferry.Model.custom("toy")
    assert m.add_tensor("w", "BF16", (4, 8)) == 0
    with pytest.raises(ferry.InvalidArgumentError):
        m.add_tensor("w", "BF16", (4, 8))  # names are unique
    lay = ferry.Layout.custom(m, 2)
    b0 = lay.add_buffer(0, "w.top", "BF16", 2 * 8 * 2)
    lay.add_piece("w", (0, 0), (2, 8), 0, b0, 0, (8, 1))
    with pytest.raises(ferry.CoverageError, match="w"):
        lay.validate()  # rows 2..4 are held by nobody
    b1 = lay.add_buffer(1, "w.bottom", "BF16", 2 * 8 * 2)
    with pytest.raises(ferry.Error):
        lay.add_piece("w", (2, 0), (2, 8), 1, b1, 8, (8, 1))  # bytes beyond the buffer
    lay.add_piece("w", (2, 0), (2, 8), 1, b1, 0, (8, 1))
    cov = lay.validate()
    assert cov["elements"] == 32 and cov["pieces"] == 2
    assert [b.name for b in lay.buffers(1)] == ["w.bottom"]
    assert lay.pieces(1)[0].offset == (2, 0) and lay.parallel is None and lay.side is None


def test_layouts_train_infer_hf():
    m = ferry.Model.from_config("qwen3-0.6b")
    tr = ferry.Layout.train(m, "tp=2")
    assert tr.side == "train" and tr.world_size == 2 and tr.parallel.startswith("tp=2")
    names = {b.name for b in tr.buffers(0)}
    assert "decoder.layers.0.self_attention.linear_qkv.weight" in names
    assert tr.validate()["elements"] == m.param_count
    inf = ferry.Layout.infer(m, "tp=2")
    assert "model.layers.3.mlp.gate_up_proj.weight" in {b.name for b in inf.buffers(1)}
    hf = ferry.Layout.hf(m)
    assert [b.name for b in hf.buffers(0)] == [t.name for t in m.tensors]
    assert [b.shape for b in hf.buffers(0)] == [t.shape for t in m.tensors]
    assert hf.validate()["elements"] == m.param_count
    assert ferry.Layout.hf(m).digest == hf.digest != tr.digest
    one = ferry.Layout.train(m, "tp=2", rank=1)
    assert one.buffers(0) == [] and len(one.buffers(1)) == len(tr.buffers(1))
    with pytest.raises(ferry.ConfigError, match="tp"):
        ferry.Layout.train(m, "tp=3")
    with pytest.raises(ferry.ConfigError):
        ferry.Layout.train(m, "tp=2,,pp=2")
    with pytest.raises(ferry.NotFoundError):
        tr.buffers(2)


def _toy(dtype="BF16", shape=(8, 16)):
    m = ferry.Model.custom("toy")
    m.add_tensor("w", dtype, shape)
    return m


def test_tensor_import_refusals():
    m = _toy()
    w = ferry.Writer(m, job="refusals", rank=0, world=1, meta="127.0.0.1:0", timeout=5)
    with pytest.raises(ferry.InvalidArgumentError, match="not a tensor"):
        w.add_buffer("x", object())
    with pytest.raises(ferry.InvalidArgumentError, match="empty"):
        w.add_buffer("x", torch.zeros(0))
    with pytest.raises(ferry.UnsupportedError, match="negative strides"):
        w.add_buffer("x", np.arange(10, dtype=np.float32)[::-1])
    with pytest.raises(ferry.UnsupportedError, match="dtype"):
        w.add_buffer("x", torch.zeros(4, dtype=torch.complex64))
    with pytest.raises(ferry.InvalidArgumentError, match="element size"):
        w.add_buffer("x", torch.zeros(4, dtype=torch.uint8), dtype="BF16")
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Writer(m, job="x", rank=0)  # world missing
    lay = ferry.Layout.hf(m)
    with pytest.raises(ferry.MismatchError, match="holds F16, the buffer BF16"):
        w.add_layout(lay, 0, [torch.zeros(8, 16, dtype=torch.float16)])
    with pytest.raises(ferry.MismatchError, match="does not fit"):
        w.add_layout(lay, 0, [torch.zeros(8, 15, dtype=torch.bfloat16)])
    with pytest.raises(ferry.MismatchError, match="not contiguous"):
        w.add_layout(lay, 0, [torch.zeros(16, 8, dtype=torch.bfloat16).t()])
    w.close()
    assert w.closed
    with pytest.raises(ferry.StaleError, match="closed"):
        w.commit()
