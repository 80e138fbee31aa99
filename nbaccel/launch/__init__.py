"""Everything that runs in the notebook's own process to start, watch and stop workers."""
