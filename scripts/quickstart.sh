#!/usr/bin/env bash
# The README's first command: install what is missing, build, run the
# quickstart recipe.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/meshrun recipes/quickstart.toml
