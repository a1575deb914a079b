"""L2 the pattern language and the matcher. Imports fusion.ir and fusion.errors only."""
