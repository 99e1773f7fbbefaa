"""Train with the champion placement that ``make demo`` published, then check the saved weights.

The demo's configuration (``examples/run_pipeline_demo.py``: a small Tensor Holography, batch 16,
4 devices of 30MiB) names a registered model in MLflow's Model Registry (the local SQLite store
under ``build/mlflow``, or ``MLFLOW_TRACKING_URI``); its alias ``champion`` is the placement in
production. This script downloads it, builds the model it was placed for, pins each op to its
device (logical CPU devices here) with each device running its ops in the recorded order, trains
``--steps`` steps on a few synthetic batches (the loss falls as the model learns them: a check of
the placed step end to end, not real training), prints the loss as it goes, saves the trained
weights in Keras's format, loads them into a fresh placed step and checks they match. Exit 0 when
the loss went down and the weights match; 1 when not; 2 when there is no champion (run ``make demo``
first) or the registry cannot be reached.

    .venv/bin/python examples/train_with_champion.py [--steps 100] [--save-weights PATH] [--conf JSON]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where the trained weights go unless ``--save-weights`` says otherwise.
DEFAULT_WEIGHTS = ROOT / "build" / "demo" / "champion.weights.h5"


def main(argv: list[str] | None = None) -> int:
    """Train with the demo's champion; 0 when the loss fell and the reloaded weights match."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    parser.add_argument("--save-weights", default=str(DEFAULT_WEIGHTS),
                        help="the trained weights (.weights.h5; default "
                             f"{DEFAULT_WEIGHTS.relative_to(ROOT)})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights and the data")
    parser.add_argument("--conf", help="JSON object of pipeline parameters overriding the demo's (as "
                                       "run_pipeline_demo.py --conf): the configuration whose champion "
                                       "to take")
    args = parser.parse_args(argv)
    os.environ.setdefault("CELERITAS_HOME", str(ROOT))  # the demo's MLflow store: build/mlflow
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(ROOT / "examples"))
    import json

    import numpy as np
    from run_pipeline_demo import DEMO_PARAMS

    from celeritas_core.errors import CeleritasInputError
    from celeritas_tf.training import train_with_placement
    from tasks.tracking import TransientTrackingError
    from tasks.training import fetch_champion, model_for, registered_model_of

    try:
        with tempfile.TemporaryDirectory(prefix="celeritas-champion-") as tmp:
            params = {**DEMO_PARAMS, **(json.loads(args.conf) if args.conf else {})}
            published = fetch_champion(registered_model_of(params), tmp)
        model = model_for(published.configuration)
    except (CeleritasInputError, TransientTrackingError) as exc:
        print(f"train_with_champion: {exc}", file=sys.stderr)
        return 2
    print(f"champion: {published.describe()}", flush=True)
    every = max(1, args.steps // 10)
    with train_with_placement(model, published.placement, batch_size=published.batch_size, seed=args.seed,
                              source=published.source) as training:
        edges = training.order_edges.added if training.order_edges else 0
        print(f"placed {model.name} at batch {published.batch_size} on {training.num_devices} devices, "
              f"{training.order_mode} order ({edges} control edges)", flush=True)

        def progress(step: int, loss: float) -> None:
            if step == 1 or step % every == 0:
                print(f"  step {step:>4}/{args.steps}: loss {loss:.4f}", flush=True)

        losses = training.fit(training.synthetic_data(), steps=args.steps, progress=progress)
        saved = training.save_weights(args.save_weights)
        trained = training.weights()
    window = max(1, min(10, len(losses) // 2))
    first, last = float(np.mean(losses[:window])), float(np.mean(losses[-window:]))
    went_down = last < first
    print(f"loss {first:.4f} -> {last:.4f} (mean of the first and the last {window} steps): "
          f"{'went down' if went_down else 'did NOT go down'}")
    with train_with_placement(model, published.placement, batch_size=published.batch_size,
                              source=published.source) as fresh:
        fresh.load_weights(saved)
        match = all(np.array_equal(a, b) for a, b in zip(fresh.weights(), trained, strict=True))
    print(f"weights saved to {saved}; reloaded into a fresh placed step: "
          f"{'they match the trained ones' if match else 'they DO NOT match'}")
    return 0 if went_down and match else 1


if __name__ == "__main__":
    sys.exit(main())
