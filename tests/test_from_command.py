"""`capplan estimate --from-command`: a pasted engine command sizes as the equivalent capplan options.

Issue 24: a `vllm serve` line with --quantization fp8, --enable-prefix-caching, --enable-chunked-prefill,
--host, --port, --served-model-name pastes as it is; SGLang's launch_server and trtllm-serve too, behind
`NAME=value` prefixes, `docker run` and `\\` continuations; unknown flags and usage errors are one line;
an --api-key's value is never printed; the help is whole in an 80-column terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from capacity.engines.command_flags import ENGINE_FLAGS
from capacity.engines.command_line import CommandLineError, read_command
from pipelines.cli import app

LLAMA = Path(__file__).parent / "fixtures" / "broken_configs" / "valid-llama" / "config.json"
SECRET = "sk-live-0123456789abcdefSECRET"
ISSUE_LINE = (
    f"vllm serve {LLAMA} --quantization fp8 --enable-prefix-caching --enable-chunked-prefill "
    f"--host 0.0.0.0 --port 8000 --served-model-name llama --api-key {SECRET}"
)
runner = CliRunner()


def _json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["estimate", "--gpu", "H100", "--json", *args])
    assert result.exit_code == 0, result.output
    contract: dict[str, Any] = json.loads(result.stdout)
    return contract


def _one_line_error(*args: str) -> str:
    result = runner.invoke(app, ["estimate", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_the_issue_line_is_the_equivalent_options_plus_one_note() -> None:
    pasted = _json("--from-command", ISSUE_LINE)
    by_hand = _json(str(LLAMA), "--dtype", "fp8", "--enable-prefix-caching")  # prefix caching is applied
    ignored = [n for n in pasted["notes"] if n.startswith("ignored for capacity:")]
    assert ignored == [
        "ignored for capacity: --enable-chunked-prefill, --host, --port, --served-model-name, --api-key"
    ]
    assert {k: v for k, v in pasted.items() if k != "notes"} == {k: v for k, v in by_hand.items() if k != "notes"}
    assert [n for n in pasted["notes"] if n not in ignored] == by_hand["notes"]
    assert pasted["modelled"] is True


def test_the_api_key_value_is_never_printed() -> None:
    for extra in ([], ["--json"]):
        result = runner.invoke(app, ["estimate", "--gpu", "H100", "--from-command", ISSUE_LINE, *extra])
        assert result.exit_code == 0 and SECRET not in result.output
    result = runner.invoke(app, ["estimate", "--gpu", "H100", "--from-command", f"{ISSUE_LINE} --api-kye={SECRET}"])
    assert result.exit_code == 2 and SECRET not in result.output and "--api-kye" in result.stderr


def test_json_is_one_object() -> None:
    result = runner.invoke(app, ["estimate", "--from-command", ISSUE_LINE, "--gpu", "H100", "--json"])
    assert result.exit_code == 0
    assert isinstance(json.loads(result.stdout), dict)


def test_env_prefixes_and_continuations() -> None:
    line = f"VLLM_USE_V1=1 HF_TOKEN=hf_{SECRET} vllm serve {LLAMA} \\\n  --tensor-parallel-size 2 \\\n  --max-model-len 4k"
    result = runner.invoke(app, ["estimate", "--gpu", "H100", "--from-command", line, "--json"])
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    assert json.loads(result.stdout) == _json(str(LLAMA), "--tp", "2", "--max-model-len", "4000")


def test_docker_image_tag_names_the_release() -> None:
    line = (
        "docker run --runtime nvidia --gpus all -v ~/.cache/huggingface:/root/.cache/huggingface "
        f"--env HF_TOKEN={SECRET} -p 8000:8000 --ipc=host vllm/vllm-openai:v0.21.0 --model {LLAMA} -tp 2"
    )
    command = read_command(line)
    assert (command.engine, command.release, command.options) == ("vllm", "0.21.0", {"tp": 2})
    pasted = _json("--from-command", line)
    assert pasted["notes"][-1] == "flags read against vllm 0.33.0's table (the command names 0.21.0)"
    assert pasted == {**_json(str(LLAMA), "--tp", "2", "--engine-version", "0.21.0"), "notes": pasted["notes"]}


def test_vllm_spellings() -> None:
    command = read_command(
        "vllm serve M --tensor_parallel_size 2 --max-model-len auto --tensor-parallel 2 -O3 -cc.mode 3 "
        "--gpu-memory-utilization=0.85 --max-num-batched-tokens 8K --disable-prefix-caching --no-enforce-eager"
    )
    assert command.options == {
        "tp": 2, "max_model_len": -1, "gpu_memory_utilization": 0.85, "max_num_batched_tokens": 8192,
        "enforce_eager": False, "enable_prefix_caching": False,
    }
    assert command.unsized == ("--optimization-level", "-cc.mode")
    assert command.ignored == ()


def test_python_module_launchers() -> None:
    vllm = read_command(f"python3 -m vllm.entrypoints.openai.api_server --model {LLAMA} --gpu-memory-utilization 0.8")
    assert (vllm.engine, vllm.options) == ("vllm", {"gpu_memory_utilization": 0.8})


def test_sglang_launch_server() -> None:
    line = (
        f"python -m sglang.launch_server --model-path {LLAMA} --tp 2 --mem-fraction-static 0.8 "
        "--context-length 8192 --host 0.0.0.0 --port 30000 --enable-metrics"
    )
    pasted = _json("--from-command", line)
    by_hand = _json(
        str(LLAMA), "--engine", "sglang", "--tp", "2", "--gpu-memory-utilization", "0.8", "--max-model-len", "8192"
    )
    assert pasted["notes"][-1] == "ignored for capacity: --host, --port, --enable-metrics"
    assert {k: v for k, v in pasted.items() if k != "notes"} == {k: v for k, v in by_hand.items() if k != "notes"}
    assert read_command(f"sglang serve --model-path {LLAMA} --tp-size 4").options == {"tp": 4}
    # --disable-cuda-graph is --enforce-eager: no CUDA graphs, none reserved for in the default fraction (0.5.14 on)
    eager = read_command(f"python -m sglang.launch_server --model-path {LLAMA} --disable-cuda-graph")
    assert (eager.options, eager.unsized) == ({"enforce_eager": True}, ())


def test_trtllm_serve() -> None:
    line = f"trtllm-serve {LLAMA} --tp_size 2 --max_batch_size 64 --max_num_tokens 4096 --host 0.0.0.0 --port 8000"
    pasted = _json("--from-command", line)
    by_hand = _json(
        str(LLAMA), "--engine", "trtllm", "--tp", "2", "--max-num-seqs", "64", "--max-num-batched-tokens", "4096"
    )
    assert pasted["notes"][-1] == "ignored for capacity: --host, --port"
    assert {k: v for k, v in pasted.items() if k != "notes"} == {k: v for k, v in by_hand.items() if k != "notes"}


def test_unsized_flags_are_flagged() -> None:
    line = f"vllm serve {LLAMA} --enable-lora --speculative-config '{{\"method\": \"ngram\"}}' --num-gpu-blocks-override 9"
    contract = _json("--from-command", line)
    assert contract["modelled"] is False
    assert any("--num-gpu-blocks-override" in n and n.startswith("not modelled") for n in contract["notes"])
    assert not any("LoRA" in n and n.startswith("not modelled") for n in contract["notes"])  # LoRA is sized
    assert any(n.startswith("LoRA: 1 adapter slot(s) of rank 16") for n in contract["notes"])


def test_an_explicit_capplan_option_wins_and_says_so() -> None:
    contract = _json("--tp", "4", "--from-command", f"vllm serve {LLAMA} -tp 2")
    assert contract == {**_json(str(LLAMA), "--tp", "4"), "notes": contract["notes"]}
    assert any("win over the command: --tp" in n for n in contract["notes"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("vllm serve M --tensor-paralel-size 2", "--tensor-paralel-size is not a flag of vLLM 0.33.0's vllm serve "
         "(did you mean --tensor-parallel-size?)"),
        ("python -m sglang.launch_server --model-path M --mem-fraction 0.8 --tp-sise 2",
         "--tp-sise is not a flag of SGLang 0.5.23"),
        ("trtllm-serve M --tp-size 2", "did you mean --tp_size?"),
        ("vllm serve M --max 2", "--max is ambiguous"),
        ("vllm serve M -tp", "-tp needs a value"),
        ("vllm serve", "names no model"),
        ("llama-server -m M", "not an engine command"),
        ("vllm serve 'M", "cannot split"),
    ],
)
def test_command_errors_are_one_line(line: str, message: str) -> None:
    assert message in _one_line_error("--gpu", "H100", "--from-command", line)


def test_model_and_from_command_not_both() -> None:
    assert "not both" in _one_line_error(str(LLAMA), "--gpu", "H100", "--from-command", f"vllm serve {LLAMA}")


def test_every_table_names_its_release_and_source() -> None:
    for engine in ("vllm", "sglang", "trtllm"):
        assert ENGINE_FLAGS[engine]["release"] and ENGINE_FLAGS[engine]["source"]
    assert ENGINE_FLAGS["vllm"]["flags"]["-tp"] == ("tensor_parallel_size", "1")
    assert ENGINE_FLAGS["sglang"]["flags"]["--tp-size"] == ("tp_size", "1")
    with pytest.raises(CommandLineError):
        read_command("vllm serve M --no-such-flag")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["estimate", str(LLAMA), "--foo"], "capplan: error: no such option --foo"),
        (["estimate", str(LLAMA), "--tpp", "2"], "(did you mean"),
        (["estimate", str(LLAMA), "--tp", "two"], "invalid value for '--tp'"),
        (["nosuch"], "no such command 'nosuch'"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "╭" not in result.output


def test_help_is_whole_in_80_columns() -> None:
    result = CliRunner().invoke(app, ["estimate", "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert all(len(line) <= 80 for line in result.output.splitlines())
    assert "…" not in result.output and "╭" not in result.output
    flat = "".join(result.output.split())  # wrapping may break at a hyphen: compare without whitespace
    command = typer.main.get_command(app).commands["estimate"]  # type: ignore[attr-defined]
    for param in command.params:
        for name in getattr(param, "opts", []):
            assert name in flat, name
        if getattr(param, "help", None):
            assert "".join(param.help.split()) in flat, param.name
    assert "vLLM0.92" in flat


def test_no_two_options_share_a_help_text() -> None:
    command = typer.main.get_command(app).commands["estimate"]  # type: ignore[attr-defined]
    helps = [p.help for p in command.params if getattr(p, "help", None)]
    assert len(helps) == len(set(helps))


def test_the_sql_fast_path_usage_error_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pipelines.cli import main

    monkeypatch.setattr("sys.argv", ["capplan", "sql", "--bogus"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == ["capplan: error: no such option --bogus; see capplan sql -h"]


# flags vLLM 0.7.3's parser had and 0.33's does not (0.7.3 vllm/engine/arg_utils.py: `--swap-space`,
# `--num-scheduler-steps`; vllm/entrypoints/openai/cli_args.py: `--enable-reasoning`)
OLD_LINE = f"vllm serve {LLAMA} --swap-space 16 --num-scheduler-steps 8 --enable-reasoning --max-model-len 4096"


def test_an_older_release_named_keeps_its_retired_flags_and_says_so() -> None:
    """A command that ran on vLLM 0.7.3 is not refused for flags 0.33 retired: they are skipped (values too)
    and named, and the estimate is the one without them."""
    pasted = _json("--from-command", OLD_LINE, "--engine-version", "0.7.3")
    by_hand = _json(str(LLAMA), "--max-model-len", "4096", "--engine-version", "0.7.3")
    retired = [n for n in pasted["notes"] if "--swap-space" in n]
    assert retired == [
        "not flags of vLLM 0.33.0's parser: --swap-space, --num-scheduler-steps, --enable-reasoning; "
        "taken as 0.7.3's own (since retired), not sized"
    ]
    assert pasted["kv_budget_bytes_per_gpu"] == by_hand["kv_budget_bytes_per_gpu"]
    assert pasted["max_model_len"] == 4096
    command = read_command("docker run vllm/vllm-openai:v0.6.6 --model M --swap-space 4 -tp 2")
    assert (command.release, command.retired, command.options) == ("0.6.6", ("--swap-space",), {"tp": 2})


@pytest.mark.parametrize("release", [None, "0.33.0"])
def test_a_flag_unknown_to_the_named_or_current_release_is_still_an_error(release: str | None) -> None:
    args = ["--engine-version", release] if release else []
    message = _one_line_error("--gpu", "H100", "--from-command", OLD_LINE, *args)
    assert "--swap-space is not a flag of vLLM 0.33.0's vllm serve" in message
    assert ("--engine-version" in message) is (release is None)


def test_a_retired_flag_that_is_now_an_ambiguous_prefix_is_kept_for_an_older_release() -> None:
    """SGLang 0.5.14 split --cuda-graph-max-bs into -decode / -prefill (so the old spelling is an ambiguous prefix
    in 0.5.23, whose parser refuses it); a 0.4.4 command with it is read, and the decode graphs' batch it sets is
    sized, as the new spelling and the largest of a --cuda-graph-bs-decode list are. A command that names no release
    is read the same way, with a note: the spelling says an older release ran it (the SGLang docs' CI of February
    2026 did, `evaluation/data/feature_logs/lora.yaml`), and refusing it would refuse what the engine ran."""
    line = "python -m sglang.launch_server --model-path M --cuda-graph-max-bs 8 --tp 2"
    assert "ambiguous" in _one_line_error("--gpu", "H100", "--from-command", line, "--engine-version", "0.5.23")
    unnamed = read_command(line)
    assert unnamed.options == {"cuda_graph_max_batch": 8, "tp": 2}
    assert any("--cuda-graph-max-bs is a flag of older SGLang releases" in note for note in unnamed.notes)
    command = read_command(line, "0.4.4.post3")
    assert (command.retired, command.options) == ((), {"cuda_graph_max_batch": 8, "tp": 2})
    assert read_command("python -m sglang.launch_server --model-path M --cuda-graph-max-bs-decode 64").options == {
        "cuda_graph_max_batch": 64
    }
    listed = read_command("python -m sglang.launch_server --model-path M --cuda-graph-bs-decode 1 2 4 96 16")
    assert listed.options == {"cuda_graph_max_batch": 96}
    older = read_command("python -m sglang.launch_server --model-path M --cuda-graph-bs 1 2 4 8 --tp 2", "0.5.2")
    assert (older.retired, older.options) == ((), {"cuda_graph_max_batch": 8, "tp": 2})
    prefill = read_command("python -m sglang.launch_server --model-path M --cuda-graph-max-bs-prefill 4096")
    assert prefill.unsized == ("--cuda-graph-max-bs-prefill",)


def test_a_retired_flag_s_values_are_all_its_own_where_the_server_takes_no_positional() -> None:
    """SGLang's --piecewise-cuda-graph-tokens took a list (nargs "+" in 0.5.9's server_args.py) and launch_server
    takes no positional argument, so every value up to the next flag is the retired flag's; vLLM's serve takes the
    model as a positional, so a retired vLLM flag keeps one value at most."""
    line = "python -m sglang.launch_server --model-path M --piecewise-cuda-graph-tokens 256 512 1024 --tp 2"
    command = read_command(line, "0.5.9")
    assert (command.retired, command.options) == (("--piecewise-cuda-graph-tokens",), {"tp": 2})
    negative = read_command("python -m sglang.launch_server --model-path M --piecewise-cuda-graph-tokens 1 -2 --tp 2", "0.5.9")
    assert negative.options == {"tp": 2}
    vllm = read_command("vllm serve --swap-space 4 M -tp 2", "0.6.6")
    assert (vllm.model, vllm.retired, vllm.options) == ("M", ("--swap-space",), {"tp": 2})


def test_an_eagle_config_without_its_model_is_sized_with_an_assumed_head() -> None:
    """`{"method": "eagle"}` quoted without the draft's id: one EAGLE layer of the target's shape is assumed and
    said (the fixture's Llama: 16 + 1 layers x 8 KV heads x 64 (2048 / 32) x 2 x 2 B = 34,816 B per token), never
    refused."""
    line = f"vllm serve {LLAMA} --speculative-config '{{\"method\": \"eagle\"}}'"
    contract = _json("--from-command", line)
    assert contract["kv_bytes_per_token"] == 17 * 8 * 64 * 2 * 2
    assert any("assumed one decoder layer" in n for n in contract["notes"])
