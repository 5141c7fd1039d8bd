"""What every part of the tool agrees on about where a dtype comes from: which calls are casts
(`casts`), which calls are in place (`inplace`) and which files are the user's (`files`). The watch, the dry run, numerics, the
experiment and the edits import these; none keeps its own copy."""
