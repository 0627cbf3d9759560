"""The server's heap, settled once it is ready: start-up objects frozen, young
collections rarer.

CPython's cyclic collector stops every thread while it runs, and a full
collection walks every container object the process holds. Under load (10,000
instances, 100 clients) a full collection ran every 5-10 s and took 200-300 ms
(320,000 objects, three quarters of them imported modules, the app's routes and
the fleet as built at start-up): every request in flight waited for it, which
was the whole of the API's 99th percentile (docs/benchmarks.md). So, once:

- `gc.freeze()` after a full collection: what start-up built lives as long as the
  process, so no collection needs to walk it again (CPython's own advice for
  long-lived servers);
- the young generation collected every `YOUNG_GENERATION_OBJECTS` allocations
  instead of 700: the objects of a request or a pass die before it is collected,
  instead of being promoted and making the old generation grow to its next full
  collection. A young collection then takes 10-30 ms, not a whole request's worth.

Cycles among the frozen objects are never collected: that is the trade, and it
holds because nothing built at start-up is dropped in a cycle later.
"""

from __future__ import annotations

import gc

YOUNG_GENERATION_OBJECTS = 10_000
_OLDER_GENERATIONS = (10, 10)  # CPython's defaults: each older generation per 10 of the younger


def settle_heap() -> int:
    """Collect, freeze what is left, make young collections rarer; returns how
    many objects were frozen."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION_OBJECTS, *_OLDER_GENERATIONS)
    return gc.get_freeze_count()
