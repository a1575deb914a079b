"""L5 the pass driver (rules -> PassResult) and its text/JSON rendering. Imports fusion.patterns and below."""
