import pickle
import shutil

import pytest
import torch
from conftest import tiny_model

from nmt.config import build_config, save_config
from nmt.data.batching import make_batch
from nmt.errors import NmtError
from nmt.inference import loading
from nmt.runtime import checkpoint


def _outputs(model):
    batch = make_batch([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    return model(batch.src, batch.src_len, batch.tgt_in)


def test_save_load_gives_identical_outputs(tmp_path):
    model = tiny_model(vocab=30)
    optimizer = torch.optim.Adam(model.parameters())
    model.train()
    loss = model.generator(_outputs(model)[0]).sum()
    loss.backward()
    optimizer.step()
    model.eval()
    checkpoint.save(tmp_path / "last.safetensors", model, optimizer, {"step": 3})
    other = tiny_model(vocab=30, seed=1)
    tensors, meta = checkpoint.read(tmp_path / "last.safetensors", other, training=True)
    checkpoint.load_model_weights(other, tensors, tmp_path / "last.safetensors")
    for a, b in zip(_outputs(model), _outputs(other)):
        assert torch.equal(a, b)
    other_opt = torch.optim.Adam(other.parameters())
    checkpoint.load_optimizer(other_opt, tensors, meta, tmp_path)
    assert checkpoint.train_state(meta, tmp_path) == {"step": 3}
    for p, q in zip(model.parameters(), other.parameters()):
        assert optimizer.state[p].keys() == other_opt.state[q].keys()
        if not optimizer.state[p]:  # the generator had no gradient in this pass
            continue
        assert torch.equal(optimizer.state[p]["exp_avg"], other_opt.state[q]["exp_avg"])
        assert torch.equal(optimizer.state[p]["step"], other_opt.state[q]["step"])


def test_load_run_rebuilds_from_directory_alone(tmp_path, tokenizer):
    cfg = build_config({}, {"embed_size": 6, "hidden_size": 8, "dropout": 0.0})
    cfg = cfg.replace(vocab=tokenizer.vocab_size)
    save_config(cfg, tmp_path / "config.yaml")
    shutil.copy(tokenizer.model_path, tmp_path / "spm.model")
    model = tiny_model(tokenizer.vocab_size)
    checkpoint.save(tmp_path / "best.safetensors", model)
    _, loaded, _ = loading.load_run(tmp_path, torch.device("cpu"))
    for a, b in zip(_outputs(model), _outputs(loaded)):
        assert torch.equal(a, b)


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "best.safetensors"
    checkpoint.save(path, tiny_model(vocab=30))
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(NmtError, match="best.safetensors: truncated or corrupted"):
        checkpoint.read(path, tiny_model(vocab=30))


class _Payload:
    def __reduce__(self):
        return (open, ("/tmp/nmt-pwned-marker", "w"))


def test_pickle_payload_is_never_executed(tmp_path):
    import os
    marker = "/tmp/nmt-pwned-marker"
    if os.path.exists(marker):
        os.remove(marker)
    path = tmp_path / "best.safetensors"
    path.write_bytes(pickle.dumps(_Payload()))
    with pytest.raises(NmtError, match="best.safetensors"):
        checkpoint.read(path, tiny_model(vocab=30))
    assert not os.path.exists(marker)
