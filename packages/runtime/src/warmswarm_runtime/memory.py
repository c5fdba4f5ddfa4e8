"""Python's cycle collector, set for a service whose cycle builds a snapshot of the whole cluster."""

from __future__ import annotations

import gc

# Allocations (less frees) between two collections of the youngest generation; Python's default is 700.
YOUNG_OBJECTS = 50_000


def tune_gc(young_objects: int = YOUNG_OBJECTS) -> None:
    """Collect less often, and never walk what start-up made. Call once, after start-up.

    A cycle at 10,000 nodes makes some hundreds of thousands of objects (the snapshot's values, the API's
    answers); at the default threshold the collector runs hundreds of times per cycle and each older
    generation's pass walks the long-lived ones again: half of an idle cycle's CPU went there. Reference
    counting frees nearly all of these objects anyway; the collector only finds reference cycles, which
    a larger threshold finds a little later.
    """
    gc.collect()
    gc.freeze()  # modules, settings and clients live as long as the process: no collection looks at them
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_objects, middle, old)
