"""Named rewards for the config task: parses, port, settings kept; reward is all three."""

import json
import os
import sys

scores = {"parses": 0.0, "port": 0.0, "kept": 0.0}
try:
    with open(sys.argv[1]) as handle:
        config = json.load(handle)
    scores["parses"] = 1.0
    scores["port"] = float(config.get("port") == int(os.environ["EXPECTED_PORT"]))
    scores["kept"] = float(config.get("name") == "svc" and config.get("debug") is False)
except (OSError, ValueError):
    pass
scores["reward"] = float(all(v == 1.0 for v in scores.values()))
print(json.dumps(scores))
