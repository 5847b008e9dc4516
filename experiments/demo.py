"""The demo config: `jaxjudge.experiment.demo`, re-exported here so that ``experiments/demo.py``
(and ``experiments/demo.py:ci``, ``experiments/demo.py:all``) keeps naming it for ``jaxjudge sweep``, ``report`` and
``extract`` from the repository. ``jaxjudge demo`` runs the package's copy from any folder.
"""

from jaxjudge.experiment.demo import BASE, SMOLLM2, VARIANTS, get_config

__all__ = ["BASE", "SMOLLM2", "VARIANTS", "get_config"]
