"""Loading a registered model as a user's process would: a fresh interpreter that cannot import the suite (shared by
test_registry, test_compositional and test_boostaug_encoder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Loads a model in a fresh interpreter (-I: no PYTHONPATH, no script folder) whose imports of the suite's own
# packages fail: the model must carry what it needs. Prints the predictions and what it imported.
FRESH_PROCESS = r"""
import importlib.abc, json, sys

class NoSuite(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("common", "jobs"):
            raise ImportError(f"the suite's {name} imported by a registered model")
        return None

sys.meta_path.insert(0, NoSuite())
import mlflow, pandas as pd
mlflow.set_tracking_uri(sys.argv[1])
out = {}
for uri in json.loads(sys.argv[2]):
    model = mlflow.pyfunc.load_model(uri)
    predicted = model.predict(pd.DataFrame({"text": json.loads(sys.argv[3])}))
    out[uri] = {"predictions": predicted.to_dict("list"), "signature": model.metadata.signature.to_dict()}
print(json.dumps(out))
"""


def fresh_predictions(tracking_uri: str, uris: list[str], texts: list, cwd: Path) -> dict:
    """:data:`FRESH_PROCESS`'s output (by model URI) for the models ``uris`` on ``texts``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    done = subprocess.run(
        [sys.executable, "-I", "-c", FRESH_PROCESS, tracking_uri, json.dumps(uris), json.dumps(texts)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
