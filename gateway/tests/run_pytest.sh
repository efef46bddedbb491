#!/usr/bin/env bash
# ctest's gateway_pytest: runs the gateway's pytest suite with the gateway's Python.
# Usage: run_pytest.sh PYTHON EXL3_LAUNCH [pytest args...]
set -euo pipefail
python=$1
launch=$2
shift 2
if [[ ! -x $python ]]; then
  echo "gateway_pytest: $python is missing: run scripts/setup (it makes build/gateway-venv with" \
       "gateway/requirements.txt), or configure with -DEXL3_GATEWAY_PYTHON=PATH" >&2
  exit 1
fi
if ! "$python" -c "import fastapi, uvicorn, jinja2, grpc, grpc_tools, openai, httpx, pytest" 2>/dev/null; then
  echo "gateway_pytest: $python lacks the gateway's packages: run scripts/setup" >&2
  exit 1
fi
cd "$(dirname "$0")"
export EXL3_LAUNCH=$launch PYTHONDONTWRITEBYTECODE=1
exec "$python" -m pytest -q -p no:cacheprovider "$@" .
