#!/usr/bin/env bash
# Make a virtual environment in which benchmarks/reference_speed.py can run
# the reference implementation (AllenNLP 2.10.1's ELMo biLM) next to ours.
#
#     bash benchmarks/reference_env.sh /tmp/refenv
#     /tmp/refenv/bin/python benchmarks/reference_speed.py
#
# The environment sees this interpreter's packages (torch, spacy_elmo, h5py,
# ...) and adds AllenNLP without its dependencies: its pinned ones would
# replace torch with a CUDA build of several GB. The AllenNLP wheel is checked
# against its sha256; torch is held at the installed version by a constraint.
# AllenNLP is Apache-2.0 licensed; it is only installed here, never vendored.
set -euo pipefail
env_dir="${1:?usage: bash benchmarks/reference_env.sh ENV_DIR}"
python="${PYTHON:-python}"
here="$(cd "$(dirname "$0")" && pwd)"
"$python" -m venv --system-site-packages "$env_dir"
torch_version="$("$env_dir/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==$torch_version" > "$constraints"
"$env_dir/bin/pip" install -q --no-deps --require-hashes -r "$here/reference-requirements.txt"
# What allennlp.modules.elmo imports at module level (allennlp.common and
# allennlp.nn import these), nothing else.
"$env_dir/bin/pip" install -q -c "$constraints" \
    "cached_path>=1.5" "huggingface_hub>=0.30,<1.0" lmdb dill base58 more_itertools
"$env_dir/bin/python" -c 'import torch; print("reference environment ready: torch", torch.__version__)'
