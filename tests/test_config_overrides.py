"""Config overrides as the engines apply them (vLLM `--hf-overrides`, SGLang `--json-model-override-args`), and the
context limit per vLLM release that they most often move.

Expected values are hand derivations from the engines' source:
- vLLM 0.33 config/model.py `ModelConfig.__post_init__`: flat values `config.update()`d in `get_config`; dict values
  through `_apply_dict_overrides`: onto a nested config recursively (`_update_nested`), else set whole;
- SGLang 0.5.23 srt/utils/hf_transformers/config.py `get_config`: a dict onto a nested config `update()`d one level;
  a rope dict merged over the current one; else set;
- `_get_and_verify_max_len`: a YaRN entry leaves the length keys as they are from vLLM 0.30 (the 0.30.0 and 0.32.0
  wheels), sets original_max_position_embeddings x factor up to 0.29 (the 0.29.0 wheel).
tests/test_engine_oracle_start.py runs vLLM 0.33's own override steps and length check on six overridden configs.
"""

from __future__ import annotations

import json

import pytest
from click.testing import Result
from typer.testing import CliRunner

from capacity.estimate import estimate
from capacity.hf_config.overrides import (
    MAX_OVERRIDE_DEPTH,
    ConfigOverrides,
    OverrideError,
    OverrideRule,
    read_overrides,
)
from capacity.spec import DeploymentSpec, GpuSku, SpecError
from models_registry.resolve import load_model
from pipelines.cli import app

H100 = GpuSku(id="test-h100", name="H100", vendor="nvidia", memory_total_bytes=80 * 2**30, architecture="hopper")
YARN_4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
NESTED = {
    "model_type": "outer",
    "rope_scaling": {"rope_type": "default", "rope_theta": 1e6},
    "text_config": {"model_type": "inner", "max_position_embeddings": 4096, "rope_parameters": {"rope_theta": 5.0}},
}


def test_vllm_sets_top_level_keys_and_merges_nested_configs_recursively() -> None:
    out = OverrideRule.VLLM.applied(NESTED, {"rope_scaling": YARN_4, "text_config": {"rope_scaling": {"factor": 2}}})
    # a dict onto a plain dict attribute is set whole (rope_theta gone), under the one rope field
    assert out["rope_parameters"] == YARN_4 and "rope_scaling" not in out
    # onto a nested config: merged key by key, the rope alias into the field the sub-config has
    assert out["text_config"] == {"model_type": "inner", "max_position_embeddings": 4096,
                                  "rope_parameters": {"rope_theta": 5.0, "factor": 2}}  # fmt: skip
    assert NESTED["text_config"]["rope_parameters"] == {"rope_theta": 5.0}  # the input is not changed


def test_sglang_merges_rope_dicts_and_updates_nested_configs_one_level() -> None:
    out = OverrideRule.SGLANG.applied(NESTED, {"rope_scaling": YARN_4, "text_config": {"rope_parameters": {"factor": 2}}})
    assert out["rope_parameters"] == {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                      "original_max_position_embeddings": 32768}  # fmt: skip
    # one level: the nested config's rope dict is replaced, not merged
    assert out["text_config"]["rope_parameters"] == {"factor": 2}
    assert out["text_config"]["max_position_embeddings"] == 4096


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "--hf-overrides is not valid JSON"),
        ("[1, 2]", "must be a JSON object of config keys, got list"),
        ('{"factor": NaN}', "NaN is not a JSON number"),
        ('{"a": ' * (MAX_OVERRIDE_DEPTH + 1) + "1" + "}" * (MAX_OVERRIDE_DEPTH + 1), "nest more than"),
    ],
)
def test_bad_overrides_are_one_line_reasons(text: str, words: str) -> None:
    with pytest.raises(OverrideError) as raised:
        read_overrides(text)
    assert words in str(raised.value) and "\n" not in str(raised.value)


SERVED_131K_ON_033 = DeploymentSpec(max_model_len=131072, engine="vllm", engine_version="0.33")


def _qwen3_8b(overrides: dict[str, object]) -> object:
    return load_model("Qwen/Qwen3-8B", overrides=ConfigOverrides(OverrideRule.VLLM, overrides))


def test_a_yarn_override_lengthens_the_limit_up_to_vllm_029_only() -> None:
    """Qwen3-8B (max_position_embeddings 40,960) with its model card's YaRN recipe, factor 4 over 32,768, served at
    131,072: vLLM up to 0.29 derives 32,768 x 4 = 131,072 and starts; 0.30+ keeps 40,960 and refuses unless the
    length key is overridden too (or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)."""
    plain = load_model("Qwen/Qwen3-8B")
    yarn = _qwen3_8b({"rope_scaling": YARN_4})
    assert yarn.spec.context_limit_tokens == plain.spec.context_limit_tokens == 40960
    assert yarn.spec.context_limit_vllm_029_tokens == 131072
    assert yarn.config_sha256 == plain.config_sha256  # the file it came from
    assert "config.json overridden by --hf-overrides: rope_scaling" in yarn.spec.notes
    old = estimate(yarn.spec, DeploymentSpec(max_model_len=131072, engine="vllm", engine_version="0.29"), gpu=H100)
    new = estimate(yarn.spec, SERVED_131K_ON_033, gpu=H100)
    assert old.starts and "refuses" not in old.reason
    assert not new.starts and "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in new.reason and "(40960)" in new.reason
    lengthened = _qwen3_8b({"rope_scaling": YARN_4, "max_position_embeddings": 131072})
    assert estimate(lengthened.spec, SERVED_131K_ON_033, gpu=H100).starts


def test_an_override_the_parser_refuses_is_a_one_line_error() -> None:
    with pytest.raises(SpecError) as raised:
        _qwen3_8b({"num_hidden_layers": -3})
    assert "\n" not in str(raised.value) and "num_hidden_layers" in str(raised.value)


def test_overrides_do_not_reach_the_file() -> None:
    before = json.dumps(load_model("Qwen/Qwen3-8B").spec.notes)
    _qwen3_8b({"max_position_embeddings": 8192})
    assert json.dumps(load_model("Qwen/Qwen3-8B").spec.notes) == before


def _cli(*args: str, command: str = "estimate") -> Result:
    return CliRunner().invoke(app, [command, *args])


def test_the_cli_and_a_pasted_command_apply_the_overrides() -> None:
    lengthened = json.dumps({"max_position_embeddings": 131072})
    direct = _cli("Qwen/Qwen3-8B", "--gpu", "h100-sxm-80gb", "--max-model-len", "131072", "--hf-overrides", lengthened, "--json")
    pasted = _cli("--from-command", f"vllm serve Qwen/Qwen3-8B --max-model-len 131072 --hf-overrides '{lengthened}'",
                  "--gpu", "h100-sxm-80gb", "--json")  # fmt: skip
    for run in (direct, pasted):
        assert run.exit_code == 0, run.output
        out = json.loads(run.stdout)
        assert out["starts"] and out["modelled"], out["reason"]
        assert "config.json overridden by --hf-overrides: max_position_embeddings" in out["notes"]
    plain = json.loads(_cli("Qwen/Qwen3-8B", "--gpu", "h100-sxm-80gb", "--max-model-len", "131072", "--json").stdout)
    assert not plain["starts"] and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in plain["reason"]
    sglang = _cli("--from-command", "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --context-length 131072 "
                  f"--json-model-override-args '{lengthened}'", "--gpu", "h100-sxm-80gb", "--json")  # fmt: skip
    assert sglang.exit_code == 0 and json.loads(sglang.stdout)["starts"], sglang.output
    for bad, words in ((["--hf-overrides", "[1]"], "JSON object"), (["--engine", "trtllm", "--hf-overrides", "{}"], "edit")):
        run = _cli("Qwen/Qwen3-8B", "--gpu", "h100-sxm-80gb", *bad)
        assert run.exit_code == 2 and run.stderr.count("\n") == 1 and words in run.stderr, run.output


def test_limits_takes_the_overrides_too() -> None:
    args = ["Qwen/Qwen3-8B", "--gpu", "h100-sxm-80gb", "--concurrency", "1", "--json"]
    lengthened = json.dumps({"max_position_embeddings": 131072})
    runs = [_cli(*args, *extra, command="limits") for extra in ([], ["--hf-overrides", lengthened])]
    plain, overridden = (json.loads(run.stdout) for run in runs)
    assert plain["model_context_limit"] == 40960 and overridden["model_context_limit"] == 131072
    assert overridden["limits"][0]["effective_limit"] == 131072
