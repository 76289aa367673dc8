"""Dynamic land-cover maps of a region: many tiles across UTM zones, many dates, one
temporally consistent series. The time axis (:mod:`.periods`), one grid for tiles of
several UTM zones and the overlap rule (:mod:`.grid`), and the temporal smoother with its
consistency figures (:mod:`.series`)."""
