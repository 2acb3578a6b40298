#!/usr/bin/env bash
# The README's first command: install what is missing, build the meshrun
# binary (only what the quickstart runs), run the quickstart recipe.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh meshrun meshrun-engine
echo "meshrun quickstart: running recipes/quickstart.toml (PPO, 2 local CPU processes)" >&2
exec build/meshrun recipes/quickstart.toml
