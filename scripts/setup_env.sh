# Sourced by the two entry scripts: a project virtualenv with dbt-partialcow and its dev extras installed.
# Idempotent and quick when nothing changed (re-installs only when pyproject.toml changes).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PARTIALCOW_VENV:-$ROOT/.venv}"
command -v java >/dev/null || { echo "Java 17 is required (apt-get install -y openjdk-17-jre-headless)" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# shellcheck disable=SC1091
source "$VENV/bin/activate"
stamp="$VENV/.partialcow-installed"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e "$ROOT[dev]"
  echo "$want" > "$stamp"
fi
export PYTHONHASHSEED=0
