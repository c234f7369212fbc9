"""The library names settings; the CLI names flags."""
import pytest
from conftest import nmt

from nmt.errors import SettingError
from nmt.runtime.devices import pick_device
from nmt.training.runs import resume_run


def test_a_setting_error_names_settings_in_the_library_and_flags_in_the_cli():
    with pytest.raises(SettingError) as caught:
        pick_device("tpu:0")
    assert str(caught.value).startswith("device tpu:0: ")
    assert caught.value.render(lambda s: "--" + s).startswith("--device tpu:0: ")
    result = nmt("translate", "--device", "tpu:0", "hello")
    assert result.returncode == 1 and result.stderr.startswith("error: --device tpu:0: "), result.stderr


def test_only_mentioned_names_are_substituted():
    error = SettingError("run_dir", "/tmp/{x}", "use {other_key} or {x}", ("other_key",))
    assert str(error) == "run_dir /tmp/{x}: use other_key or {x}"
    assert error.render(lambda s: "--" + s.replace("_", "-")) == "--run-dir /tmp/{x}: use --other-key or {x}"


def test_resume_refuses_settings_other_than_the_budget_before_touching_the_run(tmp_path):
    with pytest.raises(SettingError, match=r"^resume: continues a run with its saved config; "
                                           r"it cannot take hidden_size, lr$"):
        resume_run(tmp_path / "absent", {"max_steps": 9, "threads": 1, "lr": 0.1, "hidden_size": 8})
