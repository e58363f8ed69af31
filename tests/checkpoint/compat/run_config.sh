#!/usr/bin/env bash
# A run's config from MODEL.json beside this script: the corpus beside it too (data/: Debian
# 12's /usr/share/common-licenses, copied so that the losses do not depend on the host's
# copy), metrics into METRICS. Shared by make_fixture.sh and ../compat_test.sh.
# Usage: run_config.sh MODEL METRICS OUT
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python3 - "$here/$1.json" "$2" "$3" "$here/data" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["log"] = {"metrics": sys.argv[2]}
config["data"]["paths"] = [sys.argv[4]]
json.dump(config, open(sys.argv[3], "w"))
PY
