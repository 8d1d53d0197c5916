"""One-off experiments, one dated folder each: kept as the record of what was run, not maintained tools."""
