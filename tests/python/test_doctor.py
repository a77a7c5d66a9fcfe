"""`python -m flashattn doctor`: reports the build, torch and the extension, and the fix for each problem."""

import os
import subprocess
import sys

import flashattn


def _run(*args, env_extra=None, code=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "flashattn", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_doctor_reports_build_torch_and_extension():
    result = _run("doctor")
    text = result.stdout
    assert f"flashattn {flashattn.__version__}" in text
    assert "compiled archs:" in text or "CUDA support:      no" in text
    assert "extension:         loads" in text
    assert "torch:             " in text and "torch's CUDA:" in text
    assert result.returncode == (0 if "No problem found." in text else 1), text


def test_doctor_without_torch_says_how_to_fix():
    # torch made unimportable: the doctor still runs, and names the problem and its fix.
    code = ("import sys; sys.modules['torch'] = None\n"
            "from flashattn.doctor import report\n"
            "text, problems = report()\n"
            "print(text)\n"
            "sys.exit(0 if any('pip install torch' in fix for _, fix in problems) else 3)\n")
    result = _run(code=code)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "torch is not installed" in result.stdout


def test_import_without_torch_works_and_functions_explain():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import flashattn\n"
            "print(flashattn.__version__)\n"
            "try:\n"
            "    flashattn.flash_attn_func\n"
            "except ImportError as err:\n"
            "    print('ImportError', err)\n")
    result = _run(code=code)
    assert result.returncode == 0, result.stderr
    assert "ImportError" in result.stdout


def test_usage():
    result = _run("--help")
    assert result.returncode == 0 and "doctor" in result.stdout
    assert _run("nonsense").returncode == 2
