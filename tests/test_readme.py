"""README.md stays true: its Python example runs and its commands name real sub-commands."""

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_python_example_runs(capsys):
    block = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    assert "faster than data parallelism" in capsys.readouterr().out


def test_cli_examples_use_real_commands_and_options():
    from pase.cli import build_parser

    parser = build_parser()
    for line in re.findall(r"^pase (.*?)(?:\s+#.*)?$", README, re.M):
        argv = line.split()
        if argv[0] == "solve-instance":
            continue  # needs ../shared; covered by the search tests
        args = parser.parse_args(argv)
        assert callable(args.func)
